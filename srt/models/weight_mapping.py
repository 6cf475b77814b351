"""Checkpoint names -> parameters: the `packed_modules_mapping` walk shared by all models.

A checkpoint tensor named `...q_proj.weight` lands in `...qkv_proj.weight` as shard "q";
`gate_proj`/`up_proj` land in `gate_up_proj` as shards 0/1. Each parameter's own
`weight_loader` does the slicing for its tensor-parallel rank.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from radixlm.layers.parameter import default_weight_loader

# checkpoint module -> (fused module, shard id)
SHARD_IDS: dict[str, object] = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "gate_proj": 0, "up_proj": 1}


def _shard_id(pieces: list[str], piece: str) -> object:
    return SHARD_IDS.get(piece, pieces.index(piece))


def map_checkpoint_name(name: str, packed_modules_mapping: dict[str, list[str]]) -> tuple[str, object]:
    """(parameter name, shard id) for a checkpoint tensor name."""
    for fused, pieces in packed_modules_mapping.items():
        for piece in pieces:
            if f".{piece}." in name:
                return name.replace(f".{piece}.", f".{fused}."), _shard_id(pieces, piece)
    return name, None


def expected_checkpoint_names(params: Iterable[str], packed_modules_mapping: dict[str, list[str]]
                              ) -> dict[str, tuple[str, object]]:
    """Every tensor a complete checkpoint provides: checkpoint name -> (parameter name, shard id)."""
    out: dict[str, tuple[str, object]] = {}
    for pname in params:
        fused = next((f for f in packed_modules_mapping if f".{f}." in pname), None)
        if fused is None:
            out[pname] = (pname, None)
            continue
        pieces = packed_modules_mapping[fused]
        for piece in pieces:
            out[pname.replace(f".{fused}.", f".{piece}.")] = (pname, _shard_id(pieces, piece))
    return out


def load_weights_into(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]],
                      skip_prefixes: tuple[str, ...] = ()) -> None:
    """Load every checkpoint tensor; ValueError naming unknown, mis-shaped or missing weights."""
    arch = type(model).__name__
    params = dict(model.named_parameters())
    mapping = getattr(model, "packed_modules_mapping", {})
    loaded: set[tuple[str, object]] = set()
    for name, tensor in weights:
        if "rotary_emb.inv_freq" in name or name.startswith(skip_prefixes):
            continue
        target, shard = map_checkpoint_name(name, mapping)
        if target not in params:
            raise ValueError(f"{arch}: checkpoint weight {name!r} has no matching parameter")
        param = params[target]
        loader = getattr(param, "weight_loader", default_weight_loader)
        try:
            loader(param, tensor.to(param.dtype), shard)
        except ValueError as exc:
            raise ValueError(f"{arch}: cannot load checkpoint weight {name!r} into parameter {target!r}: {exc}") from exc
        loaded.add((target, shard))
    missing = [ckpt for ckpt, (pname, shard) in expected_checkpoint_names(params, mapping).items()
               if (pname, shard) not in loaded and (pname, None) not in loaded]
    if missing:
        more = f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
        raise ValueError(f"{arch}: checkpoint is missing weights: {', '.join(sorted(missing)[:10])}{more}")
