"""RMSNorm and fused residual-add + RMSNorm: one program per row, float32 inside.

The rounding points are Hugging Face's (and the native layer's): the normalized row is rounded to
the output dtype before the weight multiplies it, and the product is rounded again (no-ops in
float32), so in bf16 the kernel gives HF's module's values, not ones a rounding step away.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixlm_kernel.utils import next_power_of_2, num_warps_for, pdl_args, pdl_begin


@triton.jit
def _store_normalized(out_ptr, out_stride, row, cols, mask, x, w_ptr, hidden, eps):
    """Store `w * round(x * rsqrt(mean(x**2) + eps))` (x float32, one row) into row `row` of out."""
    dtype = out_ptr.dtype.element_ty
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / hidden + eps)
    normed = (x * rstd).to(dtype).to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, (normed * w).to(dtype), mask=mask)


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, x_stride, out_stride, hidden, eps, BLOCK: tl.constexpr,
                    USE_PDL: tl.constexpr):
    pdl_begin(USE_PDL)  # see radixlm_kernel.utils.pdl_args
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    _store_normalized(out_ptr, out_stride, row, cols, mask, x, w_ptr, hidden, eps)


@triton.jit
def _fused_add_rmsnorm_kernel(x_ptr, res_ptr, w_ptr, x_stride, res_stride, hidden, eps, BLOCK: tl.constexpr,
                              USE_PDL: tl.constexpr):
    pdl_begin(USE_PDL)  # see radixlm_kernel.utils.pdl_args
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + row * res_stride + cols, mask=mask, other=0.0).to(tl.float32)
    # round the sum to the residual's dtype first, so the norm sees exactly what is stored
    s = (x + r).to(res_ptr.dtype.element_ty)
    tl.store(res_ptr + row * res_stride + cols, s, mask=mask)
    _store_normalized(x_ptr, x_stride, row, cols, mask, s.to(tl.float32), w_ptr, hidden, eps)


def _check_rows(x: torch.Tensor, name: str) -> None:
    if x.dim() != 2 or x.stride(-1) != 1:
        raise ValueError(f"{name} must be 2-D [tokens, hidden] with unit last stride, got {tuple(x.shape)}")


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`x * rsqrt(mean(x**2) + eps) * weight` over the last dim of `[T, H]`; a new tensor."""
    _check_rows(x, "x")
    out = torch.empty_like(x)
    if x.shape[0] == 0:
        return out
    block = next_power_of_2(x.shape[1])
    _rmsnorm_kernel[(x.shape[0],)](x, weight, out, x.stride(0), out.stride(0), x.shape[1], eps,
                                   BLOCK=block, num_warps=num_warps_for(block), **pdl_args(x))
    return out


def fused_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """In place: `residual += x`; `x = rmsnorm(residual) * weight` (both `[T, H]`)."""
    _check_rows(x, "x")
    _check_rows(residual, "residual")
    if x.shape != residual.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} differ")
    if x.shape[0] == 0:
        return
    block = next_power_of_2(x.shape[1])
    _fused_add_rmsnorm_kernel[(x.shape[0],)](x, residual, weight, x.stride(0), residual.stride(0), x.shape[1],
                                             eps, BLOCK=block, num_warps=num_warps_for(block), **pdl_args(x))
