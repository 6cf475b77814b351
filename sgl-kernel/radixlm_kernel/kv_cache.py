"""Write new tokens' K and V into the pool: `k_buffer[loc[t]] = k[t]` (cast to the pool's dtype)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixlm_kernel.utils import jit_any_alignment, next_power_of_2

_BLOCK = 1024


@jit_any_alignment("loc_ptr")
def _store_kv_kernel(k_buf_ptr, v_buf_ptr, loc_ptr, k_ptr, v_ptr, k_buf_stride, v_buf_stride, k_stride, v_stride,
                     k_width, v_width, BLOCK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    slot = tl.load(loc_ptr + token).to(tl.int64)
    k = tl.load(k_ptr + token * k_stride + cols, mask=cols < k_width)
    tl.store(k_buf_ptr + slot * k_buf_stride + cols, k.to(k_buf_ptr.dtype.element_ty), mask=cols < k_width)
    v = tl.load(v_ptr + token * v_stride + cols, mask=cols < v_width)
    tl.store(v_buf_ptr + slot * v_buf_stride + cols, v.to(v_buf_ptr.dtype.element_ty), mask=cols < v_width)


def _rows(x: torch.Tensor, name: str) -> torch.Tensor:
    """`[T, H, D]` or `[T, H*D]` with contiguous heads -> a `[T, H*D]` view."""
    flat = x.reshape(x.shape[0], -1)
    if flat.stride(-1) != 1 or (x.dim() == 3 and x.stride(1) != x.shape[2]):
        raise ValueError(f"{name} must have contiguous heads, got shape {tuple(x.shape)} strides {x.stride()}")
    return flat


def store_kv_cache(k_buffer: torch.Tensor, v_buffer: torch.Tensor, loc: torch.Tensor, k: torch.Tensor,
                   v: torch.Tensor) -> None:
    """k/v `[T, Hk, D]` into `[slots, Hk, D]` buffers at `loc` `[T]`."""
    k_flat, v_flat = _rows(k, "k"), _rows(v, "v")
    kb, vb = _rows(k_buffer, "k_buffer"), _rows(v_buffer, "v_buffer")
    num_tokens = k_flat.shape[0]
    if num_tokens == 0:
        return
    k_width, v_width = k_flat.shape[1], v_flat.shape[1]
    block = min(_BLOCK, next_power_of_2(max(k_width, v_width)))
    grid = (num_tokens, triton.cdiv(max(k_width, v_width), block))
    _store_kv_kernel[grid](kb, vb, loc, k_flat, v_flat, kb.stride(0), vb.stride(0), k_flat.stride(0),
                           v_flat.stride(0), k_width, v_width, BLOCK=block, num_warps=4)
