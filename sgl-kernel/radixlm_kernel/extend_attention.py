"""Extend (prefill) attention over a page-size-1 KV pool.

Request b has `extend_seq_lens[b]` new tokens at rows `extend_start_loc[b]...` of
q/k/v_extend and `seq_lens[b] - extend_seq_lens[b]` cached tokens whose slots are
`req_to_token[req_pool_indices[b], :prefix]`. New token j attends to the whole prefix
(stage 1, read from the pool) and to new tokens 0..j (stage 2, read from k/v_extend,
causal). One program per (request, q head, block of BLOCK_M new tokens), online softmax in
base 2; only the prefix's tail block and the diagonal blocks of the causal part are masked.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixlm_kernel.decode_attention import _as_heads
from radixlm_kernel.utils import jit_any_alignment, next_power_of_2

# Tuning knobs, module-level so a sweep (benchmark/gpu_kernel_sweep.py) can set them.
BLOCK_M = 128
BLOCK_N = 64
NUM_WARPS = 8
NUM_STAGES = 3  # (128, 64, 8, 3): best or near on the H200 sweep, RESULTS.md
_LOG2E = 1.4426950408889634


@triton.jit
def _attend(q, k, v, m, l, acc, qk_scale, mask, MASKED: tl.constexpr):
    """Fold one block of keys `k` `[D, N]` / values `v` `[N, Dv]` into the running (m, l, acc);
    scores are in base 2 (`qk_scale` includes log2(e)). Only diagonal and tail blocks are MASKED."""
    s = tl.dot(q, k) * qk_scale
    if MASKED:
        s = tl.where(mask, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, axis=1))
    alpha = tl.math.exp2(m - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l * alpha + tl.sum(p, axis=1), acc


@triton.jit
def _load_pool_block(k_buf_ptr, v_buf_ptr, req_to_token_ptr, row, r2t_s0, n, n_mask, kv_head, kb_s0, kb_s1, vb_s0,
                     vb_s1, d, dv, head_dim, v_head_dim, dtype):
    slots = tl.load(req_to_token_ptr + row * r2t_s0 + n, mask=n_mask, other=0).to(tl.int64)
    k = tl.load(k_buf_ptr + slots[None, :] * kb_s0 + kv_head * kb_s1 + d[:, None],
                mask=n_mask[None, :] & (d[:, None] < head_dim), other=0.0).to(dtype)
    v = tl.load(v_buf_ptr + slots[:, None] * vb_s0 + kv_head * vb_s1 + dv[None, :],
                mask=n_mask[:, None] & (dv[None, :] < v_head_dim), other=0.0).to(dtype)
    return k, v


@jit_any_alignment("req_pool_ptr", "seq_lens_ptr", "ext_lens_ptr", "ext_start_ptr")
def _extend_kernel(q_ptr, k_ptr, v_ptr, o_ptr, k_buf_ptr, v_buf_ptr, req_to_token_ptr, req_pool_ptr, seq_lens_ptr,
                   ext_lens_ptr, ext_start_ptr, qk_scale, q_s0, q_s1, k_s0, k_s1, v_s0, v_s1, o_s0, o_s1,
                   kb_s0, kb_s1, vb_s0, vb_s1, r2t_s0, group, head_dim: tl.constexpr, v_head_dim: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    block_m = tl.num_programs(2) - 1 - tl.program_id(2)  # the longest (last) query blocks start first
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
        dtype = k_ptr.dtype.element_ty
        q = tl.load(q_ptr + (ext_start + rows[:, None]) * q_s0 + head * q_s1 + d[None, :],
                    mask=r_mask[:, None] & (d[None, :] < head_dim), other=0.0).to(dtype)
        m = tl.full([BLOCK_M], -1e30, dtype=tl.float32)
        l = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
        # stage 1: the cached prefix through req_to_token; full blocks unmasked, then the tail
        prefix_full = (prefix // BLOCK_N) * BLOCK_N
        for n0 in range(0, prefix_full, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            k, v = _load_pool_block(k_buf_ptr, v_buf_ptr, req_to_token_ptr, row, r2t_s0, n, n < prefix, kv_head,
                                    kb_s0, kb_s1, vb_s0, vb_s1, d, dv, head_dim, v_head_dim, dtype)
            m, l, acc = _attend(q, k, v, m, l, acc, qk_scale, None, False)
        if prefix_full < prefix:
            n = prefix_full + tl.arange(0, BLOCK_N)
            n_mask = n < prefix
            k, v = _load_pool_block(k_buf_ptr, v_buf_ptr, req_to_token_ptr, row, r2t_s0, n, n_mask, kv_head,
                                    kb_s0, kb_s1, vb_s0, vb_s1, d, dv, head_dim, v_head_dim, dtype)
            m, l, acc = _attend(q, k, v, m, l, acc, qk_scale, n_mask[None, :], True)
        # stage 2: the new tokens, causally; blocks wholly below the diagonal need no mask
        block_start = block_m * BLOCK_M
        for n0 in range(0, block_start, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            k = tl.load(k_ptr + (ext_start + n[None, :]) * k_s0 + kv_head * k_s1 + d[:, None],
                        mask=d[:, None] < head_dim, other=0.0)
            v = tl.load(v_ptr + (ext_start + n[:, None]) * v_s0 + kv_head * v_s1 + dv[None, :],
                        mask=dv[None, :] < v_head_dim, other=0.0)
            m, l, acc = _attend(q, k, v, m, l, acc, qk_scale, None, False)
        causal_end = tl.minimum(ext_len, block_start + BLOCK_M)
        for n0 in range(block_start, causal_end, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            n_mask = n < ext_len
            k = tl.load(k_ptr + (ext_start + n[None, :]) * k_s0 + kv_head * k_s1 + d[:, None],
                        mask=n_mask[None, :] & (d[:, None] < head_dim), other=0.0)
            v = tl.load(v_ptr + (ext_start + n[:, None]) * v_s0 + kv_head * v_s1 + dv[None, :],
                        mask=n_mask[:, None] & (dv[None, :] < v_head_dim), other=0.0)
            mask = n_mask[None, :] & (n[None, :] <= rows[:, None])
            m, l, acc = _attend(q, k, v, m, l, acc, qk_scale, mask, True)
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
    # BLOCK_M must be a multiple of BLOCK_N (the causal loop's unmasked part ends on a BLOCK_M boundary)
    block_m = max(BLOCK_N, BLOCK_M // BLOCK_N * BLOCK_N)
    grid = (bs, num_q_heads, triton.cdiv(max_len_extend, block_m))
    _extend_kernel[grid](
        q3, k3, v3, o3, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, extend_seq_lens,
        extend_start_loc, sm_scale * _LOG2E, q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), v3.stride(0),
        v3.stride(1), o3.stride(0), o3.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0),
        v_buffer.stride(1), req_to_token.stride(0), num_q_heads // num_kv_heads, head_dim, v_head_dim,
        BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_D=next_power_of_2(head_dim), BLOCK_DV=next_power_of_2(v_head_dim),
        num_warps=NUM_WARPS if head_dim > 64 else max(4, NUM_WARPS // 2), num_stages=NUM_STAGES)
