"""Rotary position embedding over flattened q/k `[num_tokens, heads * head_size]`.

The cache is `[max_position, rotary_dim]`: cos of the `rotary_dim // 2` frequencies, then
their sin (the layout the Triton kernel reads). Styles: NeoX (rotate the two halves, what
Hugging Face Llama/Qwen checkpoints use) and GPT-J (rotate interleaved pairs). Scaling
types: `linear` (positions / factor) and `llama3` (per-frequency smooth interpolation).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import nn

from radixlm.layers.kernel_dispatch import kernel_for


def compute_inv_freq(base: float, rotary_dim: int, rope_scaling: Optional[dict[str, Any]]) -> torch.Tensor:
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim))
    rope_type = (rope_scaling or {}).get("rope_type", rope_scaling.get("type") if rope_scaling else None)
    if rope_type in (None, "default"):
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(rope_scaling["factor"])
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, rope_scaling)
    raise ValueError(f"unsupported rope_scaling type {rope_type!r}; supported: default, linear, llama3")


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Long wavelengths are divided by `factor`, short ones kept, the band between blended."""
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old_ctx = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen, high_freq_wavelen = old_ctx / low, old_ctx / high
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_ctx / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    in_band = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(in_band, blended, scaled)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_size: int, rotary_dim: int, max_position: int, base: float,
                 is_neox_style: bool = True, rope_scaling: Optional[dict[str, Any]] = None) -> None:
        super().__init__()
        if rotary_dim > head_size or rotary_dim % 2:
            raise ValueError(f"rotary_dim {rotary_dim} must be even and <= head_size {head_size}")
        self.head_size, self.rotary_dim, self.is_neox_style = head_size, rotary_dim, is_neox_style
        inv_freq = compute_inv_freq(base, rotary_dim, rope_scaling)
        freqs = torch.outer(torch.arange(max_position, dtype=torch.int64).float(), inv_freq)
        cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)  # [max_position, rotary_dim], float32
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q `[T, Hq*D]` and k `[T, Hk*D]` at `positions` `[T]`; returns the rotated pair."""
        kernel = kernel_for(query)
        if kernel is not None and query.stride(-1) == 1 and key.stride(-1) == 1:
            kernel.apply_rotary_pos_emb_(positions, query, key, self.head_size, self.cos_sin_cache,
                                         self.is_neox_style)
            return query, key
        return self.forward_native(positions, query, key)

    def forward_and_store_kv(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, target: Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
                             ) -> bool:
        """Rotate q/k in place and write k/v into the KV pool in one kernel, when `target`
        `(k_buffer, v_buffer, loc)` is given and the kernels run here; False means nothing was done."""
        kernel = kernel_for(query)
        if kernel is None or target is None or min(t.stride(-1) for t in (query, key, value)) != 1:
            return False
        k_buffer, v_buffer, loc = target
        kernel.apply_rotary_pos_emb_and_store_kv_(positions, query, key, value, self.head_size, self.cos_sin_cache,
                                                  self.is_neox_style, k_buffer, v_buffer, loc)
        return True

    def forward_native(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.cos_sin_cache.index_select(0, positions.long()).chunk(2, dim=-1)
        return self._rotate(query, cos, sin), self._rotate(key, cos, sin)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        shape, dtype = x.shape, x.dtype
        x = x.reshape(shape[0], -1, self.head_size)
        rot, rest = x[..., :self.rotary_dim], x[..., self.rotary_dim:]
        cos, sin = cos.unsqueeze(1).to(dtype), sin.unsqueeze(1).to(dtype)
        if self.is_neox_style:
            x1, x2 = rot.chunk(2, dim=-1)
            rot = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        else:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            rot = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        return torch.cat((rot, rest), dim=-1).reshape(shape)


_ROPE_CACHE: dict[tuple, RotaryEmbedding] = {}


def get_rope(head_size: int, rotary_dim: int, max_position: int, base: float, is_neox_style: bool = True,
             rope_scaling: Optional[dict[str, Any]] = None) -> RotaryEmbedding:
    """A shared RotaryEmbedding per configuration (all layers of a model use one cache)."""
    scaling_key = tuple(sorted((k, str(v)) for k, v in (rope_scaling or {}).items()))
    device = str(torch.get_default_device())  # models built under `with torch.device(...)` get their own
    key = (head_size, rotary_dim, max_position, float(base), is_neox_style, scaling_key, device)
    if key not in _ROPE_CACHE:
        _ROPE_CACHE[key] = RotaryEmbedding(head_size, rotary_dim, max_position, base, is_neox_style, rope_scaling)
    return _ROPE_CACHE[key]


def rope_config(config: Any) -> tuple[float, Optional[dict[str, Any]]]:
    """(base, scaling) from a Hugging Face config, old style (`rope_theta`, `rope_scaling`) or new (`rope_parameters`)."""
    params = getattr(config, "rope_parameters", None) or {}
    scaling = getattr(config, "rope_scaling", None) or params or None
    base = params.get("rope_theta", getattr(config, "rope_theta", None) or 10000.0)
    return float(base), scaling
