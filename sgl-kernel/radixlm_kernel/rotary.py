"""Rotary position embedding applied in place to q `[T, Hq*D]` and k `[T, Hk*D]`.

`cos_sin_cache` is `[max_pos, rotary_dim]` float32: the cos of the `rotary_dim // 2`
frequencies, then their sin (any scaling, e.g. llama3, is already folded in). NeoX style
rotates the two halves of the first `rotary_dim` dims; the interleaved (GPT-J) style
rotates adjacent pairs. Dims past `rotary_dim` are left alone. One program per token.

`apply_rotary_pos_emb_and_store_kv_` also writes the rotated k and the untouched v into the
KV pool at each token's slot, saving the separate store kernel (and the copies a fused qkv
projection would otherwise need): q, k and v may be strided column slices of one tensor.

Rounded where Hugging Face's `q * cos + rotate_half(q) * sin` rounds in q's dtype: cos and sin,
each product, then the sum (no-ops in float32).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixlm_kernel.utils import jit_any_alignment, next_power_of_2


@triton.jit
def _rotated(x_ptr, row_stride, token, num_heads, cos, sin, head_size, half,
             IS_NEOX: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """Load the rotary pairs of `num_heads` heads of row `token` and rotate them (float32); returns
    the offsets of each pair within a head (the heads are `head_size` apart) with the results."""
    heads = tl.arange(0, BLOCK_H)[:, None]
    pairs = tl.arange(0, BLOCK_HALF)[None, :]
    mask = (heads < num_heads) & (pairs < half)
    if IS_NEOX:
        off1 = heads * head_size + pairs
        off2 = heads * head_size + pairs + half
    else:
        off1 = heads * head_size + pairs * 2
        off2 = heads * head_size + pairs * 2 + 1
    src = x_ptr + token * row_stride
    dtype = x_ptr.dtype.element_ty
    x1 = tl.load(src + off1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + off2, mask=mask, other=0.0).to(tl.float32)
    c = cos.to(dtype).to(tl.float32)
    s = sin.to(dtype).to(tl.float32)
    y1 = (x1 * c).to(dtype).to(tl.float32) - (x2 * s).to(dtype).to(tl.float32)
    y2 = (x2 * c).to(dtype).to(tl.float32) + (x1 * s).to(dtype).to(tl.float32)
    return off1, off2, mask, y1, y2


@triton.jit
def _rotate_heads(x_ptr, row_stride, token, num_heads, cos, sin, head_size, half,
                  IS_NEOX: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    off1, off2, mask, y1, y2 = _rotated(x_ptr, row_stride, token, num_heads, cos, sin, head_size, half, IS_NEOX,
                                        BLOCK_H, BLOCK_HALF)
    base = x_ptr + token * row_stride
    tl.store(base + off1, y1.to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(base + off2, y2.to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotate_store_heads(x_ptr, row_stride, token, dst_ptr, dst_row, num_heads, cos, sin, head_size, half,
                        rotary_dim, IS_NEOX: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
                        BLOCK_REST: tl.constexpr):
    """Rotate `num_heads` heads of row `token` in place and also store them at `dst_row` of dst
    (heads contiguous, `head_size` apart); dims past `rotary_dim` are copied unchanged."""
    off1, off2, mask, y1, y2 = _rotated(x_ptr, row_stride, token, num_heads, cos, sin, head_size, half, IS_NEOX,
                                        BLOCK_H, BLOCK_HALF)
    src = x_ptr + token * row_stride
    dst = dst_ptr + dst_row
    y1 = y1.to(x_ptr.dtype.element_ty)
    y2 = y2.to(x_ptr.dtype.element_ty)
    tl.store(src + off1, y1, mask=mask)
    tl.store(src + off2, y2, mask=mask)
    # rounded through the activation dtype first, so the pool holds exactly what attention reads in place
    tl.store(dst + off1, y1.to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + off2, y2.to(dst_ptr.dtype.element_ty), mask=mask)
    if BLOCK_REST > 0:  # partial rotary: the pass-through dims go to the pool as they are
        heads = tl.arange(0, BLOCK_H)[:, None]
        rest = heads * head_size + rotary_dim + tl.arange(0, BLOCK_REST)[None, :]
        rmask = (heads < num_heads) & (rest < heads * head_size + head_size)
        tail = tl.load(src + rest, mask=rmask, other=0.0)
        tl.store(dst + rest, tail.to(dst_ptr.dtype.element_ty), mask=rmask)


@jit_any_alignment("pos_ptr", "loc_ptr")
def _rotary_store_kernel(pos_ptr, loc_ptr, q_ptr, k_ptr, v_ptr, cache_ptr, kb_ptr, vb_ptr, q_stride, k_stride,
                         v_stride, cache_stride, kb_stride, vb_stride, num_q_heads, num_k_heads, head_size,
                         v_width, half, rotary_dim, IS_NEOX: tl.constexpr, BLOCK_HQ: tl.constexpr,
                         BLOCK_HK: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr,
                         BLOCK_V: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + token).to(tl.int64)
    slot = tl.load(loc_ptr + token).to(tl.int64)
    pairs = tl.arange(0, BLOCK_HALF)[None, :]
    cos = tl.load(cache_ptr + pos * cache_stride + pairs, mask=pairs < half, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * cache_stride + half + pairs, mask=pairs < half, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, q_stride, token, num_q_heads, cos, sin, head_size, half, IS_NEOX, BLOCK_HQ, BLOCK_HALF)
    _rotate_store_heads(k_ptr, k_stride, token, kb_ptr, slot * kb_stride, num_k_heads, cos, sin, head_size, half,
                        rotary_dim, IS_NEOX, BLOCK_HK, BLOCK_HALF, BLOCK_REST)
    cols = tl.arange(0, BLOCK_V)
    v = tl.load(v_ptr + token * v_stride + cols, mask=cols < v_width)
    tl.store(vb_ptr + slot * vb_stride + cols, v.to(vb_ptr.dtype.element_ty), mask=cols < v_width)


@jit_any_alignment("pos_ptr")
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
    _check_qk(q, k, head_size, cos_sin_cache)
    rotary_dim = cos_sin_cache.shape[1]
    num_tokens = q.shape[0]
    if num_tokens == 0:
        return
    hq, hk, half = q.shape[1] // head_size, k.shape[1] // head_size, rotary_dim // 2
    _rotary_kernel[(num_tokens,)](
        positions, q, k, cos_sin_cache, q.stride(0), k.stride(0), cos_sin_cache.stride(0), hq, hk, head_size, half,
        IS_NEOX=bool(is_neox), BLOCK_HQ=next_power_of_2(hq), BLOCK_HK=next_power_of_2(hk),
        BLOCK_HALF=next_power_of_2(half), num_warps=4)


def _check_qk(q: torch.Tensor, k: torch.Tensor, head_size: int, cos_sin_cache: torch.Tensor) -> None:
    if q.dim() != 2 or k.dim() != 2 or q.stride(-1) != 1 or k.stride(-1) != 1:
        raise ValueError("q and k must be 2-D [tokens, heads * head_size] with unit last stride")
    if q.shape[1] % head_size or k.shape[1] % head_size:
        raise ValueError(f"q {tuple(q.shape)} / k {tuple(k.shape)} are not multiples of head_size {head_size}")
    rotary_dim = cos_sin_cache.shape[1]
    if rotary_dim > head_size or rotary_dim % 2:
        raise ValueError(f"cos_sin_cache width {rotary_dim} must be even and <= head_size {head_size}")


def apply_rotary_pos_emb_and_store_kv_(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                       head_size: int, cos_sin_cache: torch.Tensor, is_neox: bool,
                                       k_buffer: torch.Tensor, v_buffer: torch.Tensor, loc: torch.Tensor) -> None:
    """Rotate q and k in place (as `apply_rotary_pos_emb_`) and write the rotated k and v `[T, Hk*D]`
    into the pool buffers `[slots, Hk, D]` at `loc` `[T]`, in one launch."""
    _check_qk(q, k, head_size, cos_sin_cache)
    if v.dim() != 2 or v.stride(-1) != 1:
        raise ValueError("v must be 2-D [tokens, heads * v_head_dim] with unit last stride")
    kb, vb = k_buffer.reshape(k_buffer.shape[0], -1), v_buffer.reshape(v_buffer.shape[0], -1)
    if kb.shape[1] != k.shape[1] or vb.shape[1] != v.shape[1]:
        raise ValueError(f"k {tuple(k.shape)} / v {tuple(v.shape)} do not match the pool rows "
                         f"{tuple(k_buffer.shape)} / {tuple(v_buffer.shape)}")
    if kb.stride(-1) != 1 or vb.stride(-1) != 1:
        raise ValueError("the KV pool buffers must have contiguous rows")
    num_tokens = q.shape[0]
    if num_tokens == 0:
        return
    rotary_dim = cos_sin_cache.shape[1]
    hq, hk = q.shape[1] // head_size, k.shape[1] // head_size
    rest = head_size - rotary_dim
    _rotary_store_kernel[(num_tokens,)](
        positions, loc, q, k, v, cos_sin_cache, kb, vb, q.stride(0), k.stride(0), v.stride(0),
        cos_sin_cache.stride(0), kb.stride(0), vb.stride(0), hq, hk, head_size, v.shape[1], rotary_dim // 2,
        rotary_dim, IS_NEOX=bool(is_neox), BLOCK_HQ=next_power_of_2(hq), BLOCK_HK=next_power_of_2(hk),
        BLOCK_HALF=next_power_of_2(rotary_dim // 2), BLOCK_REST=next_power_of_2(rest) if rest else 0,
        BLOCK_V=next_power_of_2(v.shape[1]), num_warps=4)
