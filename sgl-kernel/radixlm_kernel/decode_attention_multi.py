"""Decode attention with several requests per program, for large batches whose requests share
cached prefixes (page-size-1 pool, GQA-aware).

One program per (group of R neighbouring requests in `order`, kv head) walks the R contexts
together, BLOCK_N tokens at a time. Where all R requests map the block to the same KV slots
(their shared prefix: the radix cache hands them the same slots, and `prefix_order` makes
them neighbours), K/V are loaded once and one `[R*G, D] x [D, N]` product serves all R
requests' query heads; elsewhere each request's block is loaded and attended separately,
with the other rows masked. R*G = 16 query rows (G = the GQA group, padded to a power of
two) fill one MMA tile. No KV splits: this is for batches that fill the GPU by themselves
(see `multi_request_rows` and the backend's policy). The result does not depend on R.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixlm_kernel.extend_attention import _LOG2E, _attend
from radixlm_kernel.utils import next_power_of_2

BLOCK_N = 64
NUM_WARPS = 4
NUM_STAGES = 2
_NO_SLOT = tl.constexpr(-2147483647)


@triton.jit
def _load_kv(k_buf_ptr, v_buf_ptr, slots, kv_head, kb_s0, kb_s1, vb_s0, vb_s1, d, dv, head_dim, v_head_dim):
    ok = slots >= 0
    s64 = tl.where(ok, slots, 0).to(tl.int64)
    k = tl.load(k_buf_ptr + s64[None, :] * kb_s0 + kv_head * kb_s1 + d[:, None],
                mask=ok[None, :] & (d[:, None] < head_dim), other=0.0)
    v = tl.load(v_buf_ptr + s64[:, None] * vb_s0 + kv_head * vb_s1 + dv[None, :],
                mask=ok[:, None] & (dv[None, :] < v_head_dim), other=0.0)
    return k, v


@triton.jit
def _decode_multi_kernel(q_ptr, k_buf_ptr, v_buf_ptr, r2t_ptr, req_pool_ptr, seq_lens_ptr, order_ptr, o_ptr,
                         qk_scale, bs, q_s0, q_s1, kb_s0, kb_s1, vb_s0, vb_s1, r2t_s0, o_s0, o_s1, group, head_dim,
                         v_head_dim, R: tl.constexpr, G: tl.constexpr, BLOCK_D: tl.constexpr,
                         BLOCK_DV: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    kv_head = tl.program_id(1)
    ri = tl.arange(0, R)  # the program's requests
    r_idx = pid * R + ri
    r_ok = r_idx < bs
    b = tl.load(order_ptr + r_idx, mask=r_ok, other=0).to(tl.int64)
    row = tl.load(req_pool_ptr + b, mask=r_ok, other=0).to(tl.int64)
    seq = tl.load(seq_lens_ptr + b, mask=r_ok, other=0).to(tl.int32)
    h = tl.arange(0, R * G)  # the program's query rows: request h // G, head h % G of the group
    hr = h // G
    hg = h % G
    h_idx = pid * R + hr
    h_req = h_idx < bs
    h_ok = h_req & (hg < group)
    hb = tl.load(order_ptr + h_idx, mask=h_req, other=0).to(tl.int64)
    h_seq = tl.load(seq_lens_ptr + hb, mask=h_req, other=0).to(tl.int32)
    heads = kv_head * group + hg
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    q = tl.load(q_ptr + hb[:, None] * q_s0 + heads[:, None] * q_s1 + d[None, :],
                mask=h_ok[:, None] & (d[None, :] < head_dim), other=0.0).to(k_buf_ptr.dtype.element_ty)
    m = tl.full([R * G], -1e30, dtype=tl.float32)
    l = tl.zeros([R * G], dtype=tl.float32)
    acc = tl.zeros([R * G, BLOCK_DV], dtype=tl.float32)
    max_len = tl.max(seq, axis=0)
    for n0 in range(0, max_len, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        valid = r_ok[:, None] & (n[None, :] < seq[:, None])
        slots = tl.load(r2t_ptr + row[:, None] * r2t_s0 + n[None, :], mask=valid, other=-1).to(tl.int32)
        lead = tl.max(tl.where(ri[:, None] == 0, slots, _NO_SLOT), axis=0)
        differs = tl.sum(((slots != lead[None, :]) & r_ok[:, None]).to(tl.int32), axis=1)
        row_mask = h_ok[:, None] & (n[None, :] < h_seq[:, None])
        if tl.max(differs, axis=0) == 0:  # one block of shared slots: load once, attend for every request
            k, v = _load_kv(k_buf_ptr, v_buf_ptr, lead, kv_head, kb_s0, kb_s1, vb_s0, vb_s1, d, dv, head_dim,
                            v_head_dim)
            m, l, acc = _attend(q, k, v, m, l, acc, qk_scale, row_mask, True)
        else:
            for j in tl.static_range(R):
                slots_j = tl.max(tl.where(ri[:, None] == j, slots, _NO_SLOT), axis=0)
                k, v = _load_kv(k_buf_ptr, v_buf_ptr, slots_j, kv_head, kb_s0, kb_s1, vb_s0, vb_s1, d, dv,
                                head_dim, v_head_dim)
                m, l, acc = _attend(q, k, v, m, l, acc, qk_scale, row_mask & (hr[:, None] == j), True)
    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    tl.store(o_ptr + hb[:, None] * o_s0 + heads[:, None] * o_s1 + dv[None, :], out.to(o_ptr.dtype.element_ty),
             mask=h_ok[:, None] & (dv[None, :] < v_head_dim))


def multi_request_rows(group: int) -> tuple[int, int]:
    """(R, G): requests per program and the padded GQA group, with R * G >= 16 query rows."""
    g = next_power_of_2(group)
    return max(1, 16 // g), g


def decode_attention_multi_fwd(q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, o: torch.Tensor,
                               req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                               sm_scale: float, order: torch.Tensor) -> None:
    """Like `decode_attention_fwd` (q/o `[bs, Hq*D]` or `[bs, Hq, D]`), R requests per program taken in
    `order` (a permutation of the rows: `prefix_order` puts requests sharing prefix slots together)."""
    from radixlm_kernel.decode_attention import _as_heads

    head_dim, v_head_dim = k_buffer.shape[-1], v_buffer.shape[-1]
    q3, o3 = _as_heads(q, head_dim), _as_heads(o, v_head_dim)
    bs, num_q_heads, num_kv_heads = q3.shape[0], q3.shape[1], k_buffer.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} q heads are not a multiple of {num_kv_heads} kv heads")
    if order.shape[0] < bs:
        raise ValueError(f"order has {order.shape[0]} entries for {bs} rows")
    if bs == 0:
        return
    group = num_q_heads // num_kv_heads
    r, g = multi_request_rows(group)
    _decode_multi_kernel[(triton.cdiv(bs, r), num_kv_heads)](
        q3, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, order, o3, sm_scale * _LOG2E, bs,
        q3.stride(0), q3.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        req_to_token.stride(0), o3.stride(0), o3.stride(1), group, head_dim, v_head_dim, R=r, G=g,
        BLOCK_D=next_power_of_2(head_dim), BLOCK_DV=next_power_of_2(v_head_dim), BLOCK_N=BLOCK_N,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES)
