"""Rotary embedding and the KV store folded into the decode attention kernel.

A decode step's new token otherwise takes its own launch per layer (rotate q/k, write k/v
into the pool) before attention: at batch 1 on an H200 those 32 launches took 79 us of a 4.6 ms
step, against ~53 us more in the attention kernel with them folded in (benchmark/RESULTS.md,
twelfth session). With `DecodeRope` passed to `decode_attention_fwd`, every split program rotates
its q heads as it loads them, and the program whose split holds the last context position
(the new token's) rotates the new k, writes k and v at the token's slot and then attends:
its own tile loop reads them back from the pool. Positions are `seq_lens - 1` (a decode
token's position), so no positions tensor is read.

Rounded where the separate kernel (`rotary.py`) rounds, so both paths write the same pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass
class DecodeRope:
    """The un-rotated new k `[bs, Hk*D]` and v `[bs, Hk*Dv]` (rows may be strided slices of one
    qkv tensor), their pool slots `loc` `[bs]`, and the rotary table (see `rotary.py`)."""
    k: torch.Tensor
    v: torch.Tensor
    loc: torch.Tensor
    cos_sin_cache: torch.Tensor
    is_neox: bool

    def check(self, bs: int, k_buffer: torch.Tensor, v_buffer: torch.Tensor) -> None:
        for name, x, width in (("k", self.k, k_buffer[0].numel()), ("v", self.v, v_buffer[0].numel())):
            if x.dim() != 2 or x.shape[0] != bs or x.shape[1] != width or x.stride(-1) != 1:
                raise ValueError(f"rope.{name} must be [{bs}, {width}] with a unit last stride, got "
                                 f"{tuple(x.shape)} strides {x.stride()}")
        if self.loc.shape[0] < bs:
            raise ValueError(f"rope.loc holds {self.loc.shape[0]} slots for a batch of {bs}")
        rotary_dim = self.cos_sin_cache.shape[1]
        if rotary_dim % 2 or rotary_dim > k_buffer.shape[-1]:
            raise ValueError(f"cos_sin_cache width {rotary_dim} must be even and <= head_dim {k_buffer.shape[-1]}")
        if k_buffer.stride(-1) != 1 or v_buffer.stride(-1) != 1:
            raise ValueError("the KV pool buffers must have a unit last stride")


@triton.jit
def rope_columns(d, half, rotary_dim, IS_NEOX: tl.constexpr):
    """For dims `d` of a head: the dim each is rotated with, its cos/sin index, whether it is the
    first of its pair (rotated with a minus) and whether it is rotated at all."""
    rotated = d < rotary_dim
    if IS_NEOX:
        first = d < half
        partner = tl.where(first, d + half, d - half)
        j = tl.where(first, d, d - half)
    else:
        first = d % 2 == 0
        partner = tl.where(first, d + 1, d - 1)
        j = d // 2
    return tl.where(rotated, partner, d), tl.where(rotated, j, 0), first, rotated


@triton.jit
def rope_apply(x, xp, cos, sin, first, rotated):
    """x rotated with its partners xp (both in the activation dtype), rounded as `rotary.py` rounds."""
    xf = x.to(tl.float32)
    c = cos.to(x.dtype).to(tl.float32)
    s = sin.to(x.dtype).to(tl.float32)
    a = (xf * c).to(x.dtype).to(tl.float32)
    b = (xp.to(tl.float32) * s).to(x.dtype).to(tl.float32)
    return tl.where(rotated, tl.where(first, a - b, a + b), xf).to(x.dtype)


@triton.jit
def rope_load(ptr, offs, d, mask, cs_ptr, pos, cs_s0, half, rotary_dim, IS_NEOX: tl.constexpr):
    """Load `ptr + offs` (whose head dims are `d`) rotated to position `pos`; `offs - d` is each
    column's head start."""
    partner, j, first, rotated = rope_columns(d, half, rotary_dim, IS_NEOX)
    x = tl.load(ptr + offs, mask=mask, other=0.0)
    xp = tl.load(ptr + offs - d + partner, mask=mask, other=0.0)
    j = j + offs * 0  # the shape of the tile
    cos = tl.load(cs_ptr + pos * cs_s0 + j, mask=mask & rotated, other=0.0)
    sin = tl.load(cs_ptr + pos * cs_s0 + half + j, mask=mask & rotated, other=0.0)
    return rope_apply(x, xp, cos, sin, first, rotated)


@triton.jit
def store_new_kv(kn_ptr, vn_ptr, kn_s0, vn_s0, k_buf_ptr, v_buf_ptr, kb_s0, vb_s0, slot, b, kv0, k_kv, d, k_ok,
                 k_off, v_kv, dv, v_ok, v_off, head_dim, v_head_dim, cs_ptr, pos, cs_s0, half, rotary_dim,
                 IS_NEOX: tl.constexpr):
    """Write row b's new k (rotated) and v of the program's kv heads into the pool at `slot`."""
    k = rope_load(kn_ptr + b * kn_s0, (kv0 + k_kv) * head_dim + d, d, k_ok, cs_ptr, pos, cs_s0, half, rotary_dim,
                  IS_NEOX)
    tl.store(k_buf_ptr + slot * kb_s0 + k_off, k.to(k_buf_ptr.dtype.element_ty), mask=k_ok)
    v = tl.load(vn_ptr + b * vn_s0 + (kv0 + v_kv) * v_head_dim + dv, mask=v_ok, other=0.0)
    tl.store(v_buf_ptr + slot * vb_s0 + v_off, v.to(v_buf_ptr.dtype.element_ty), mask=v_ok)
