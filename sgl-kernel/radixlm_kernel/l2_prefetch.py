"""Prefetch a tensor's bytes from HBM into the GPU's L2 cache, without reading them into registers.

A decode step at small batch sizes leaves HBM idle while latency-bound kernels run (attention over a
short context, norms, rotary): a prefetch launched beside them on another stream brings the next
projection's weights into L2, so that GEMV reads them from L2 instead of HBM. The prefetch changes no
value anywhere (its reference is doing nothing), only where the next kernel's loads are served from.

Two forms, both inline PTX (so the kernel needs a real GPU; under `TRITON_INTERPRET=1` and on the CPU
`l2_prefetch` returns without launching anything):
- `bulk` (sm90+): each lane issues one `cp.async.bulk.prefetch.L2` of `CHUNK` bytes (the TMA unit
  fetches them; the lane does not wait);
- `lines` (sm80+): each lane issues `prefetch.global.L2::evict_last` for one 128-byte line per
  iteration.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

LANES = 32  # one warp per program
BULK_CHUNK = 32 * 1024  # bytes per lane and bulk prefetch (a multiple of 16)
LINE = 128  # bytes per L2 line
LINES_PER_LANE = 64  # lines per lane and program in the `lines` form


@triton.jit
def _bulk_prefetch_kernel(base_ptr, nbytes, CHUNK: tl.constexpr, LANES: tl.constexpr):
    lane = tl.arange(0, LANES).to(tl.int64)
    off = tl.program_id(0).to(tl.int64) * (CHUNK * LANES) + lane * CHUNK
    size = tl.minimum(tl.maximum(nbytes - off, 0), CHUNK).to(tl.int32)  # a multiple of 16: nbytes is
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [base_ptr + off, size], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _lines_prefetch_kernel(base_ptr, nbytes, LINE: tl.constexpr, PER_LANE: tl.constexpr, LANES: tl.constexpr):
    lane = tl.arange(0, LANES).to(tl.int64)
    first = tl.program_id(0).to(tl.int64) * (LINE * LANES * PER_LANE)
    for i in range(PER_LANE):  # consecutive lanes take consecutive lines
        off = first + (i * LANES + lane) * LINE
        ok = (off < nbytes).to(tl.int32)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.s32 p, $2, 0; @p prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0; }",
            "=r,l,r", [base_ptr + off, ok], dtype=tl.int32, is_pure=False, pack=1)


def supported(t: torch.Tensor, form: str = "bulk") -> bool:
    """Whether `l2_prefetch(t, form=form)` launches a kernel: a contiguous CUDA tensor on a GPU with the
    form's instructions (bulk: sm90, lines: sm80)."""
    if not t.is_cuda or not t.is_contiguous() or t.numel() == 0:
        return False
    major = torch.cuda.get_device_capability(t.device)[0]
    return major >= (9 if form == "bulk" else 8)


def l2_prefetch(t: torch.Tensor, max_bytes: Optional[int] = None, form: str = "bulk") -> bool:
    """Ask L2 for the first `max_bytes` bytes of `t` (all of it by default), on the current stream; a
    no-op (False) where `supported` says no. Returns whether a kernel was launched."""
    if form not in ("bulk", "lines"):
        raise ValueError(f"form must be 'bulk' or 'lines', got {form!r}")
    if max_bytes is not None and max_bytes < 0:
        raise ValueError(f"max_bytes must be non-negative, got {max_bytes}")
    if not supported(t, form):
        return False
    nbytes = t.numel() * t.element_size()
    if max_bytes is not None:
        nbytes = min(nbytes, max_bytes)
    base = t.view(-1).view(torch.uint8)
    if form == "bulk":
        if base.data_ptr() % 16:
            return False
        nbytes -= nbytes % 16  # the bulk copy's size is a multiple of 16 bytes
        if nbytes == 0:
            return False
        grid = (triton.cdiv(nbytes, BULK_CHUNK * LANES),)
        _bulk_prefetch_kernel[grid](base, nbytes, CHUNK=BULK_CHUNK, LANES=LANES, num_warps=1)
    else:
        if nbytes == 0:
            return False
        grid = (triton.cdiv(nbytes, LINE * LANES * LINES_PER_LANE),)
        _lines_prefetch_kernel[grid](base, nbytes, LINE=LINE, PER_LANE=LINES_PER_LANE, LANES=LANES, num_warps=1)
    return True
