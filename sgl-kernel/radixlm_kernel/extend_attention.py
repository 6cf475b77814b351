"""Extend (prefill) attention over a page-size-1 KV pool.

Request b has `extend_seq_lens[b]` new tokens at rows `extend_start_loc[b]...` of
q/k/v_extend and `seq_lens[b] - extend_seq_lens[b]` cached tokens whose slots are
`req_to_token[req_pool_indices[b], :prefix]`. New token j attends to the whole prefix
(stage 1, read from the pool) and to new tokens 0..j (stage 2, read from k/v_extend,
causal). One program per (request, q head, block of BLOCK_M new tokens), online softmax.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixlm_kernel.decode_attention import _as_heads
from radixlm_kernel.utils import next_power_of_2

BLOCK_M = 64
BLOCK_N = 64


@triton.jit
def _online_softmax_step(q, k, v, mask, m, l, acc, sm_scale):
    """Fold one block of keys `k` `[D, N]` / values `v` `[N, Dv]` into the running (m, l, acc)."""
    s = tl.dot(q, k).to(tl.float32) * sm_scale
    s = tl.where(mask, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, axis=1))
    alpha = tl.exp(m - m_new)
    p = tl.exp(s - m_new[:, None])
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
    return m_new, l * alpha + tl.sum(p, axis=1), acc


@triton.jit
def _extend_kernel(q_ptr, k_ptr, v_ptr, o_ptr, k_buf_ptr, v_buf_ptr, req_to_token_ptr, req_pool_ptr, seq_lens_ptr,
                   ext_lens_ptr, ext_start_ptr, sm_scale, q_s0, q_s1, k_s0, k_s1, v_s0, v_s1, o_s0, o_s1,
                   kb_s0, kb_s1, vb_s0, vb_s1, r2t_s0, group, head_dim, v_head_dim,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    block_m = tl.program_id(2)
    ext_len = tl.load(ext_lens_ptr + b).to(tl.int32)
    if block_m * BLOCK_M < ext_len:
        ext_start = tl.load(ext_start_ptr + b).to(tl.int64)
        prefix = tl.load(seq_lens_ptr + b).to(tl.int32) - ext_len
        row = tl.load(req_pool_ptr + b).to(tl.int64)
        kv_head = head // group
        rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
        r_mask = rows < ext_len
        d = tl.arange(0, BLOCK_D)
        dv = tl.arange(0, BLOCK_DV)
        q = tl.load(q_ptr + (ext_start + rows[:, None]) * q_s0 + head * q_s1 + d[None, :],
                    mask=r_mask[:, None] & (d[None, :] < head_dim), other=0.0).to(k_ptr.dtype.element_ty)
        m = tl.full([BLOCK_M], -1e30, dtype=tl.float32)
        l = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
        for n0 in range(0, prefix, BLOCK_N):  # stage 1: the cached prefix, through req_to_token
            n = n0 + tl.arange(0, BLOCK_N)
            n_mask = n < prefix
            slots = tl.load(req_to_token_ptr + row * r2t_s0 + n, mask=n_mask, other=0).to(tl.int64)
            k = tl.load(k_buf_ptr + slots[None, :] * kb_s0 + kv_head * kb_s1 + d[:, None],
                        mask=n_mask[None, :] & (d[:, None] < head_dim), other=0.0).to(k_ptr.dtype.element_ty)
            v = tl.load(v_buf_ptr + slots[:, None] * vb_s0 + kv_head * vb_s1 + dv[None, :],
                        mask=n_mask[:, None] & (dv[None, :] < v_head_dim), other=0.0).to(v_ptr.dtype.element_ty)
            m, l, acc = _online_softmax_step(q, k, v, n_mask[None, :], m, l, acc, sm_scale)
        causal_end = tl.minimum(ext_len, (block_m + 1) * BLOCK_M)
        for n0 in range(0, causal_end, BLOCK_N):  # stage 2: the new tokens, causally
            n = n0 + tl.arange(0, BLOCK_N)
            n_mask = n < ext_len
            k = tl.load(k_ptr + (ext_start + n[None, :]) * k_s0 + kv_head * k_s1 + d[:, None],
                        mask=n_mask[None, :] & (d[:, None] < head_dim), other=0.0)
            v = tl.load(v_ptr + (ext_start + n[:, None]) * v_s0 + kv_head * v_s1 + dv[None, :],
                        mask=n_mask[:, None] & (dv[None, :] < v_head_dim), other=0.0)
            mask = n_mask[None, :] & (n[None, :] <= rows[:, None])
            m, l, acc = _online_softmax_step(q, k, v, mask, m, l, acc, sm_scale)
        out = acc / tl.where(l > 0, l, 1.0)[:, None]
        tl.store(o_ptr + (ext_start + rows[:, None]) * o_s0 + head * o_s1 + dv[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=r_mask[:, None] & (dv[None, :] < v_head_dim))


def extend_attention_fwd(q_extend: torch.Tensor, k_extend: torch.Tensor, v_extend: torch.Tensor,
                         o_extend: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor,
                         req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                         extend_seq_lens: torch.Tensor, extend_start_loc: torch.Tensor, max_len_extend: int,
                         sm_scale: float) -> None:
    """Writes o_extend. q/o `[T, Hq*D]` or `[T, Hq, D]`; k/v_extend `[T, Hk*D]` or `[T, Hk, D]`;
    `max_len_extend` (a host int, >= every extend_seq_lens[b]) sizes the grid."""
    head_dim, v_head_dim = k_buffer.shape[-1], v_buffer.shape[-1]
    q3, o3 = _as_heads(q_extend, head_dim), _as_heads(o_extend, v_head_dim)
    k3, v3 = _as_heads(k_extend, head_dim), _as_heads(v_extend, v_head_dim)
    bs, num_q_heads, num_kv_heads = seq_lens.shape[0], q3.shape[1], k3.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} q heads are not a multiple of {num_kv_heads} kv heads")
    if bs == 0 or max_len_extend <= 0:
        return
    grid = (bs, num_q_heads, triton.cdiv(max_len_extend, BLOCK_M))
    _extend_kernel[grid](
        q3, k3, v3, o3, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, extend_seq_lens,
        extend_start_loc, sm_scale, q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), v3.stride(0),
        v3.stride(1), o3.stride(0), o3.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0),
        v_buffer.stride(1), req_to_token.stride(0), num_q_heads // num_kv_heads, head_dim, v_head_dim,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=next_power_of_2(head_dim), BLOCK_DV=next_power_of_2(v_head_dim),
        num_warps=4 if head_dim <= 64 else 8, num_stages=2)
