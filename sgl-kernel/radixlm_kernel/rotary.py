"""Rotary position embedding applied in place to q `[T, Hq*D]` and k `[T, Hk*D]`.

`cos_sin_cache` is `[max_pos, rotary_dim]` float32: the cos of the `rotary_dim // 2`
frequencies, then their sin (any scaling, e.g. llama3, is already folded in). NeoX style
rotates the two halves of the first `rotary_dim` dims; the interleaved (GPT-J) style
rotates adjacent pairs. Dims past `rotary_dim` are left alone. One program per token.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixlm_kernel.utils import next_power_of_2


@triton.jit
def _rotate_heads(x_ptr, row_stride, token, num_heads, cos, sin, head_size, half,
                  IS_NEOX: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    heads = tl.arange(0, BLOCK_H)[:, None]
    pairs = tl.arange(0, BLOCK_HALF)[None, :]
    mask = (heads < num_heads) & (pairs < half)
    base = x_ptr + token * row_stride + heads * head_size
    if IS_NEOX:
        off1 = pairs
        off2 = pairs + half
    else:
        off1 = pairs * 2
        off2 = pairs * 2 + 1
    x1 = tl.load(base + off1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + off2, mask=mask, other=0.0).to(tl.float32)
    tl.store(base + off1, (x1 * cos - x2 * sin).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(base + off2, (x2 * cos + x1 * sin).to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(pos_ptr, q_ptr, k_ptr, cache_ptr, q_stride, k_stride, cache_stride, num_q_heads, num_k_heads,
                   head_size, half, IS_NEOX: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                   BLOCK_HALF: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + token).to(tl.int64)
    pairs = tl.arange(0, BLOCK_HALF)[None, :]
    cos = tl.load(cache_ptr + pos * cache_stride + pairs, mask=pairs < half, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * cache_stride + half + pairs, mask=pairs < half, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, q_stride, token, num_q_heads, cos, sin, head_size, half, IS_NEOX, BLOCK_HQ, BLOCK_HALF)
    _rotate_heads(k_ptr, k_stride, token, num_k_heads, cos, sin, head_size, half, IS_NEOX, BLOCK_HK, BLOCK_HALF)


def apply_rotary_pos_emb_(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int,
                          cos_sin_cache: torch.Tensor, is_neox: bool) -> None:
    """Rotate q and k in place at `positions` `[T]` (rows may be strided, e.g. slices of a fused qkv)."""
    if q.dim() != 2 or k.dim() != 2 or q.stride(-1) != 1 or k.stride(-1) != 1:
        raise ValueError("q and k must be 2-D [tokens, heads * head_size] with unit last stride")
    if q.shape[1] % head_size or k.shape[1] % head_size:
        raise ValueError(f"q {tuple(q.shape)} / k {tuple(k.shape)} are not multiples of head_size {head_size}")
    rotary_dim = cos_sin_cache.shape[1]
    if rotary_dim > head_size or rotary_dim % 2:
        raise ValueError(f"cos_sin_cache width {rotary_dim} must be even and <= head_size {head_size}")
    num_tokens = q.shape[0]
    if num_tokens == 0:
        return
    hq, hk, half = q.shape[1] // head_size, k.shape[1] // head_size, rotary_dim // 2
    _rotary_kernel[(num_tokens,)](
        positions, q, k, cos_sin_cache, q.stride(0), k.stride(0), cos_sin_cache.stride(0), hq, hk, head_size, half,
        IS_NEOX=bool(is_neox), BLOCK_HQ=next_power_of_2(hq), BLOCK_HK=next_power_of_2(hk),
        BLOCK_HALF=next_power_of_2(half), num_warps=4)
