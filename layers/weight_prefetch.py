"""L2 weight prefetch for small CUDA decode batches.

At batch 1-16 a decode step reads ~15 GB of weights through GEMVs, but between them run kernels that
leave HBM idle (rotary and the KV store, attention over short contexts, the norms). A prefetch forked
onto a side stream before such a stretch brings the next projection's weights into L2
(`radixlm_kernel.l2_prefetch`), so the GEMV after it reads them from L2. Values never change; the
side stream is joined back at the end of each decoder layer, so CUDA graph capture sees a closed
fork. Which weights: `RADIXLM_L2_PREFETCH` (see `environ.l2_prefetch`), parsed once into a
`PrefetchPlan`; the model turns the plan into one `LayerPrefetch` per decoder layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
from torch import nn

from radixlm import environ
from radixlm.layers.kernel_dispatch import kernel_for

if TYPE_CHECKING:
    from radixlm.model_executor.forward_batch import ForwardBatch

MB = 1 << 20


@dataclass(frozen=True)
class PrefetchPlan:
    o_proj: bool = True  # all of o_proj, forked after the QKV projection (beside rotary and attention)
    gate_up_bytes: int = 0  # the head of gate_up, forked before o_proj (beside o_proj and the norm)
    next_qkv_bytes: int = 0  # the head of the next layer's QKV, forked before down_proj
    max_bs: int = 16  # decode batches of at most this many rows prefetch
    form: str = "bulk"  # the kernel's form (`radixlm_kernel.l2_prefetch`): bulk (sm90) or lines (sm80)

    @property
    def empty(self) -> bool:
        return not (self.o_proj or self.gate_up_bytes or self.next_qkv_bytes)


def parse_plan(spec: str, max_bs: int) -> PrefetchPlan:
    """`o_proj,gate_up:16,qkv:8` (MB for the heads; `lines` picks the sm80 form); `0` or empty: nothing."""
    o_proj, sizes, form = False, {"gate_up": 0, "qkv": 0}, "bulk"
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, mb = item.partition(":")
        if item == "0":
            continue
        if item == "lines":
            form = "lines"
        elif name == "o_proj" and not mb:
            o_proj = True
        elif name in sizes and mb:
            try:
                sizes[name] = int(float(mb) * MB)
            except ValueError:
                raise ValueError(f"RADIXLM_L2_PREFETCH: {item!r} needs a size in MB, as in gate_up:16") from None
        else:
            raise ValueError(f"RADIXLM_L2_PREFETCH: unknown item {item!r} (o_proj, gate_up:MB, qkv:MB, lines)")
    return PrefetchPlan(o_proj, sizes["gate_up"], sizes["qkv"], max_bs, form)


_PLAN: Optional[PrefetchPlan] = None


def plan() -> PrefetchPlan:
    global _PLAN
    if _PLAN is None:
        _PLAN = parse_plan(environ.l2_prefetch(), environ.l2_prefetch_max_bs())
    return _PLAN


@dataclass
class LayerPrefetch:
    """One decoder layer's prefetches: (linear module, max bytes or None for all) per fork point. The
    modules are held in tuples, so they are not registered as submodules a second time."""
    after_qkv: tuple[tuple[nn.Module, Optional[int]], ...] = ()
    before_o_proj: tuple[tuple[nn.Module, Optional[int]], ...] = ()
    before_down: tuple[tuple[nn.Module, Optional[int]], ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.after_qkv or self.before_o_proj or self.before_down)


def layer_prefetches(layers: list[nn.Module], p: Optional[PrefetchPlan] = None) -> list[LayerPrefetch]:
    """The plan `p` (default: the environment's) for Llama-style decoder layers (`self_attn.qkv_proj`,
    `self_attn.o_proj`, `mlp.gate_up_proj`)."""
    p = p or plan()
    out = []
    for i, layer in enumerate(layers):
        nxt = layers[i + 1] if i + 1 < len(layers) else None
        out.append(LayerPrefetch(
            after_qkv=((layer.self_attn.o_proj, None),) if p.o_proj else (),
            before_o_proj=((layer.mlp.gate_up_proj, p.gate_up_bytes),) if p.gate_up_bytes else (),
            before_down=((nxt.self_attn.qkv_proj, p.next_qkv_bytes),) if p.next_qkv_bytes and nxt else ()))
    return out


_SIDE: dict[int, torch.cuda.Stream] = {}


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SIDE:
        _SIDE[index] = torch.cuda.Stream(device=index)
    return _SIDE[index]


def for_forward(layer: LayerPrefetch, x: torch.Tensor, forward_batch: "ForwardBatch") -> Optional[LayerPrefetch]:
    """`layer` when this forward prefetches (a CUDA decode batch of at most `max_bs` rows, the kernels
    installed, something to prefetch), else None. Every fork of a non-None result must be joined."""
    if layer.empty or kernel_for(x) is None or not forward_batch.forward_mode.is_decode():
        return None
    return layer if forward_batch.batch_size <= plan().max_bs else None


def fork(items: tuple[tuple[nn.Module, Optional[int]], ...], device: torch.device) -> None:
    """Prefetch each item's weight on the side stream, after the current stream's work so far."""
    if not items:
        return
    from radixlm_kernel.l2_prefetch import l2_prefetch

    side = _side_stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for module, max_bytes in items:
            l2_prefetch(module.weight, max_bytes, form=plan().form)


def join(device: torch.device) -> None:
    """The current stream waits for the prefetches forked so far (closes the fork under graph capture).
    Called once per layer whose `for_forward` was not None (so the side stream holds its work)."""
    torch.cuda.current_stream(device).wait_stream(_side_stream(device))
