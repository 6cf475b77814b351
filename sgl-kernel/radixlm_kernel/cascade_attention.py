"""Cascade decode attention: requests that share a cached prefix read its K/V once per step.

The radix cache hands requests with a common prompt prefix the same KV slots, so a decode
batch of many such requests spends most of its attention time reading those slots again for
each request. The cascade cuts each request's context at P, the prefix it shares with its
group, and attends the two parts separately:

- `cascade_plan` (device only, no host sync, so it can be captured in a CUDA graph) groups the
  batch. Requests whose slot at position `min_shared - 1` is the same share at least
  `min_shared` tokens (a slot holds one token of one tree path). A group's P is the shortest
  common slot prefix between neighbours in the group. Groups are cut into blocks of up to
  `members_per_block` requests.
- `cascade_prefix_fwd` takes one work item per (block, kv head, prefix split). It loads the
  prefix K/V once and attends every query head of the block (members x GQA group rows, one
  tensor-core product per K/V tile). Partial outputs and log-sum-exps go into split slots
  `[0, PREFIX_SPLITS)` of the decode scratch buffers.
- `decode_attention_fwd(..., cascade=plan)` then attends each request over its own
  `[P, seq_len)` and merges both parts (in the same kernel when the request has one split).

Requests that share nothing keep P = 0 and take the plain decode path inside the same launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from radixlm_kernel.extend_attention import _LOG2E, _attend, _load_pool_block
from radixlm_kernel.utils import is_fp8, next_power_of_2

MIN_SHARED = 256  # shared tokens below which a request is not worth a cascade block
PREFIX_SPLITS = 8  # scratch split slots reserved for prefix partials
PREFIX_SPLIT_LEN = 256  # prefix tokens per work item (the number of splits follows P)
BLOCK_ROWS = 64  # query rows per work item: members x the GQA group padded to a power of two
BLOCK_N = 64
NUM_WARPS = 4
NUM_STAGES = 3  # (256, 64, 4, 3): best of the H200 knob sweep, RESULTS.md
PROGRAMS_PER_SM = 2  # the prefix kernel is persistent: this many programs per SM take the work items
LCP_BLOCK = 256
_LN2: tl.constexpr = tl.constexpr(0.6931471805599453)
_NO_PREFIX = 1 << 40  # larger than any context: "no constraint" in the segment minimum


@dataclass
class CascadePlan:
    """Device tensors describing one decode batch's shared-prefix blocks (see `cascade_plan`)."""

    pre_len: torch.Tensor  # int32 [bs]: P, the request's tokens served by its block (0: none)
    n_pre: torch.Tensor  # int32 [bs]: prefix split partials written for the request (0: none)
    order: torch.Tensor  # int64 [bs]: batch rows, groups contiguous
    blk_start: torch.Tensor  # int32 [bs + 1]: a block's first member, as a position in `order`
    blk_count: torch.Tensor  # int32 [bs + 1]: its members
    blk_prefix: torch.Tensor  # int32 [bs + 1]: its P
    blk_splits: torch.Tensor  # int32 [bs + 1]: its prefix splits
    blk_row: torch.Tensor  # int64 [bs + 1]: the req_to_token row whose slots it reads
    num_blocks: torch.Tensor  # int32 [1]


def members_per_block(group: int) -> int:
    """Requests per prefix work item for a GQA group of `group` q heads per kv head."""
    return max(1, BLOCK_ROWS // next_power_of_2(group))


@triton.jit
def _lcp_kernel(r2t_ptr, r2t_s0, rows_ptr, lens_ptr, cont_ptr, out_ptr, NO_PREFIX, BLOCK: tl.constexpr):
    """out[p] = the longest common slot prefix of sorted requests p-1 and p (when p continues a
    group), at most one token short of either length: each request keeps its own newest token."""
    p = tl.program_id(0)
    if tl.load(cont_ptr + p) != 0:
        a = tl.load(rows_ptr + p - 1)
        b = tl.load(rows_ptr + p)
        found = tl.minimum(tl.load(lens_ptr + p - 1), tl.load(lens_ptr + p)) - 1
        n0 = found * 0
        while n0 < found:  # ends at the first block holding a mismatch
            n = n0 + tl.arange(0, BLOCK)
            live = n < found
            sa = tl.load(r2t_ptr + a * r2t_s0 + n, mask=live, other=0)
            sb = tl.load(r2t_ptr + b * r2t_s0 + n, mask=live, other=0)
            found = tl.minimum(found, tl.min(tl.where(live & (sa != sb), n, found), axis=0))
            n0 += BLOCK
        tl.store(out_ptr + p, found)
    else:
        tl.store(out_ptr + p, NO_PREFIX)


def _common_prefix_lens(req_to_token: torch.Tensor, rows: torch.Tensor, lens: torch.Tensor,
                        cont: torch.Tensor) -> torch.Tensor:
    out = torch.empty(rows.shape[0], dtype=torch.int64, device=rows.device)
    _lcp_kernel[(rows.shape[0],)](req_to_token, req_to_token.stride(0), rows, lens, cont.to(torch.int32), out,
                                  _NO_PREFIX, BLOCK=LCP_BLOCK, num_warps=2)
    return out


def cascade_plan(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                 members: int, min_shared: int = MIN_SHARED) -> CascadePlan:
    """Group a decode batch by shared prefix, on the device (fixed shapes: capturable).

    `members` requests at most per block (`members_per_block(group)`); `min_shared` tokens at
    least shared (the probe position must lie inside `req_to_token`'s width)."""
    if not 1 <= min_shared <= req_to_token.shape[1]:
        raise ValueError(f"min_shared {min_shared} outside 1..{req_to_token.shape[1]} (req_to_token width)")
    bs, dev = seq_lens.shape[0], seq_lens.device
    idx = torch.arange(bs, device=dev)
    rows, lens = req_pool_indices.long(), seq_lens.long()
    probe = req_to_token[rows, min_shared - 1].long()
    key = torch.where(lens > min_shared, probe, -1 - idx)  # too short to share: a key of its own
    order = torch.argsort(key, stable=True)
    sorted_key = key[order]
    cont = torch.zeros(bs, dtype=torch.bool, device=dev)
    cont[1:] = (sorted_key[1:] == sorted_key[:-1]) & (sorted_key[1:] >= 0)
    rows_s, lens_s = rows[order], lens[order]
    lcp = _common_prefix_lens(req_to_token, rows_s, lens_s, cont)
    gid = torch.cumsum((~cont).long(), 0) - 1
    group_p = torch.full((bs,), _NO_PREFIX, dtype=torch.int64, device=dev).scatter_reduce_(0, gid, lcp, "amin")
    group_n = torch.zeros(bs, dtype=torch.int64, device=dev).scatter_add_(0, gid, torch.ones_like(gid))
    group_start = torch.full((bs,), bs, dtype=torch.int64, device=dev).scatter_reduce_(0, gid, idx, "amin")
    p, n = group_p[gid], group_n[gid]
    member = (n >= 2) & (p >= min_shared)
    p = torch.where(member, p, 0)
    rank = idx - group_start[gid]
    first = member & (rank % members == 0)
    slot = torch.where(first, torch.cumsum(first.long(), 0) - 1, bs)  # slot bs collects the non-firsts
    splits = torch.clamp((p + PREFIX_SPLIT_LEN - 1) // PREFIX_SPLIT_LEN, 1, PREFIX_SPLITS)

    def per_block(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(bs + 1, dtype=dtype, device=dev).scatter_(0, slot, values.to(dtype))

    def per_request(values: torch.Tensor) -> torch.Tensor:
        return torch.zeros(bs, dtype=torch.int32, device=dev).scatter_(0, order, values.to(torch.int32))

    return CascadePlan(
        pre_len=per_request(p), n_pre=per_request(torch.where(member, splits, 0)), order=order,
        blk_start=per_block(idx, torch.int32), blk_count=per_block(torch.clamp(n - rank, max=members), torch.int32),
        blk_prefix=per_block(p, torch.int32), blk_splits=per_block(splits, torch.int32),
        blk_row=per_block(rows_s, torch.int64), num_blocks=first.sum().to(torch.int32).view(1))


@triton.jit
def _cascade_prefix_kernel(q_ptr, k_buf_ptr, v_buf_ptr, r2t_ptr, order_ptr, blk_start_ptr, blk_count_ptr,
                           blk_prefix_ptr, blk_splits_ptr, blk_row_ptr, num_blocks_ptr, mid_o_ptr, mid_lse_ptr,
                           qk_scale, q_s0, q_s1, kb_s0, kb_s1, vb_s0, vb_s1, r2t_s0, mo_s0, mo_s1, mo_s2, ml_s0,
                           ml_s1, num_kv_heads, group, head_dim, v_head_dim, G: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                           BLOCK_DV: tl.constexpr, SPLITS: tl.constexpr, KV_FP8: tl.constexpr):
    items = tl.load(num_blocks_ptr) * num_kv_heads * SPLITS
    r = tl.arange(0, BLOCK_M)
    member, hg = r // G, r % G
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    dtype = k_buf_ptr.dtype.element_ty
    if KV_FP8:  # fp8 pools are read up to q's dtype
        dtype = q_ptr.dtype.element_ty
    for w in range(tl.program_id(0), items, tl.num_programs(0)):
        s = w % SPLITS
        kv_head = (w // SPLITS) % num_kv_heads
        j = w // (SPLITS * num_kv_heads)
        n_split = tl.load(blk_splits_ptr + j)
        prefix = tl.load(blk_prefix_ptr + j)
        split_len = tl.cdiv(prefix, n_split)
        lo = s * split_len
        hi = tl.minimum(lo + split_len, prefix)
        if (s < n_split) & (lo < hi):
            start = tl.load(blk_start_ptr + j)
            count = tl.load(blk_count_ptr + j)
            row = tl.load(blk_row_ptr + j)
            in_blk = member < count
            ok = in_blk & (hg < group)
            b = tl.load(order_ptr + start + member, mask=in_blk, other=0)
            heads = kv_head * group + hg
            q = tl.load(q_ptr + b[:, None] * q_s0 + heads[:, None] * q_s1 + d[None, :],
                        mask=ok[:, None] & (d[None, :] < head_dim), other=0.0).to(dtype)
            m = tl.full([BLOCK_M], -1e30, dtype=tl.float32)
            l = tl.zeros([BLOCK_M], dtype=tl.float32)
            acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
            full_end = lo + (hi - lo) // BLOCK_N * BLOCK_N
            for n0 in range(lo, full_end, BLOCK_N):
                n = n0 + tl.arange(0, BLOCK_N)
                k, v = _load_pool_block(k_buf_ptr, v_buf_ptr, r2t_ptr, row, r2t_s0, n, n < hi, kv_head, kb_s0,
                                        kb_s1, vb_s0, vb_s1, d, dv, head_dim, v_head_dim, dtype)
                m, l, acc = _attend(q, k, v, m, l, acc, qk_scale, None, False)
            if full_end < hi:
                n = full_end + tl.arange(0, BLOCK_N)
                n_mask = n < hi
                k, v = _load_pool_block(k_buf_ptr, v_buf_ptr, r2t_ptr, row, r2t_s0, n, n_mask, kv_head, kb_s0,
                                        kb_s1, vb_s0, vb_s1, d, dv, head_dim, v_head_dim, dtype)
                m, l, acc = _attend(q, k, v, m, l, acc, qk_scale, n_mask[None, :], True)
            out_mask = ok[:, None] & (dv[None, :] < v_head_dim)
            tl.store(mid_o_ptr + b[:, None] * mo_s0 + heads[:, None] * mo_s1 + s * mo_s2 + dv[None, :],
                     acc / l[:, None], mask=out_mask)
            # the decode kernels keep natural-log LSEs; these scores are in base 2
            tl.store(mid_lse_ptr + b * ml_s0 + heads * ml_s1 + s, (m + tl.log2(l)) * _LN2, mask=ok)


def cascade_prefix_fwd(q3: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, req_to_token: torch.Tensor,
                       plan: CascadePlan, sm_scale: float, attn_logits: torch.Tensor, attn_lse: torch.Tensor,
                       num_sms: int) -> None:
    """Prefix partials of every block in `plan` into split slots [0, PREFIX_SPLITS) of the scratch."""
    bs, num_q_heads, head_dim = q3.shape
    num_kv_heads, v_head_dim = k_buffer.shape[1], v_buffer.shape[-1]
    group = num_q_heads // num_kv_heads
    g = next_power_of_2(group)
    max_items = max(1, bs // 2) * num_kv_heads * PREFIX_SPLITS  # a block has >= 2 members or is a group's tail
    grid = (max(1, min(PROGRAMS_PER_SM * num_sms, max_items)),)
    _cascade_prefix_kernel[grid](
        q3, k_buffer, v_buffer, req_to_token, plan.order, plan.blk_start, plan.blk_count, plan.blk_prefix,
        plan.blk_splits, plan.blk_row, plan.num_blocks, attn_logits, attn_lse, sm_scale * _LOG2E, q3.stride(0),
        q3.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        req_to_token.stride(0), attn_logits.stride(0), attn_logits.stride(1), attn_logits.stride(2),
        attn_lse.stride(0), attn_lse.stride(1), num_kv_heads, group, head_dim, v_head_dim, G=g,
        BLOCK_M=max(16, members_per_block(group) * g), BLOCK_N=BLOCK_N, BLOCK_D=next_power_of_2(head_dim),
        BLOCK_DV=next_power_of_2(v_head_dim), SPLITS=PREFIX_SPLITS, KV_FP8=is_fp8(k_buffer.dtype),
        num_warps=NUM_WARPS, num_stages=NUM_STAGES)
