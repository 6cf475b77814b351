"""SiLU-and-mul: `silu(x[:, :I]) * x[:, I:]` for the gated MLP, float32 inside.

Rounded where Hugging Face's `act_fn(gate) * up` rounds: SiLU's result to the output dtype, then
the product (no-ops in float32).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixlm_kernel.utils import pdl_args, pdl_begin

_BLOCK = 1024


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, x_stride, out_stride, inter, BLOCK: tl.constexpr, USE_PDL: tl.constexpr):
    pdl_begin(USE_PDL)  # see radixlm_kernel.utils.pdl_args
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * x_stride + inter + cols, mask=mask, other=0.0).to(tl.float32)
    dtype = out_ptr.dtype.element_ty
    act = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, (act * up).to(dtype), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x `[T, 2I]` -> `[T, I]`."""
    if x.dim() != 2 or x.shape[1] % 2 or x.stride(-1) != 1:
        raise ValueError(f"x must be [tokens, 2 * intermediate] with unit last stride, got {tuple(x.shape)}")
    inter = x.shape[1] // 2
    out = torch.empty((x.shape[0], inter), dtype=x.dtype, device=x.device)
    if x.shape[0] == 0:
        return out
    grid = (x.shape[0], triton.cdiv(inter, _BLOCK))
    _silu_and_mul_kernel[grid](x, out, x.stride(0), out.stride(0), inter, BLOCK=_BLOCK, num_warps=4, **pdl_args(x))
    return out
