"""Flash-decoding over a page-size-1 KV pool.

Each request's context is `req_to_token[req_pool_indices[b], :seq_lens[b]]` (slot ids).
Stage 1 splits that context into `num_kv_splits[b]` chunks; one program per
(request, group of kv heads, split) runs an online softmax for all the q heads that share
those kv heads (GQA: K/V are read once per group) and writes a partial output and its
log-sum-exp. Stage 2 merges the splits per (request, q head).

A program that takes several kv heads (`kv_heads_per_program`) reads each token's K/V
rows of those heads as one contiguous run (a page-size-1 pool scatters tokens, so longer
runs per token are what the memory system sees), and runs both dots block-diagonally:
q is laid out as `[heads x group, heads x head_dim]` with zeros off its head's block, so
`q K^T` gives every q head its own kv head's scores, and `p V` is read back on the
diagonal blocks only. With group 4 and 4 heads the 16 rows of the smallest MMA tile are
all real, so the dots cost what one head's padded dot did.

The grid is fixed by (batch size, kv heads, `max_kv_splits`) and every length is read
on the device, so a decode step can be captured in a CUDA graph and replayed with new
sequence lengths; programs whose split is past `num_kv_splits[b]` exit at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

import torch
import triton
import triton.language as tl

from radixlm_kernel import decode_splits, environ
from radixlm_kernel.decode_rope import DecodeRope, rope_load, store_new_kv
from radixlm_kernel.utils import is_fp8, jit_any_alignment, next_power_of_2, pdl_args, pdl_begin

if TYPE_CHECKING:
    from radixlm_kernel.cascade_attention import CascadePlan

# Tuning knobs, module-level so a sweep can set them; chosen on an H200 (bf16, 32 q / 8 kv heads,
# head_dim 128) over bs x ctx in {1x512, 1x4096, 8x2048, 32x1024, 64x512, 64x4096}
BLOCK_N = 64
NUM_WARPS = 2
NUM_STAGES = 3
# fp8 pools: a tile of BLOCK_N tokens is half the bytes, so they get their own knobs. FP8_VIA_F16 reads
# K/V up to float16 (one conversion instruction per two values on sm89+) and runs the dots in float16.
# FP8_SWAP_AB puts the K/V tile on the left of both dots (s^T = K q^T, acc^T += V^T p^T), so the tile
# is converted in the left operand's registers. On an H200 (`gpu_kernel_sweep.py --fp8-only`):
# bf16 reads 2.0 -> fp16 reads 2.8 TB/s at bs 192-512 (uniform lengths); K/V on the left: 2.36 -> 2.61
# TB/s at bs 512 with lengths uniform in [1, 4600]. Seventh session (`--order-only`, lengths uniform in
# [1, 2 x ctx - 1], 40% of each context's slots interleaved as decode allocates them): 2 warps, slot ids
# one tile ahead, a row's programs side by side and, in cascade-sized batches, the longest contexts
# first (the backend's launch order): 647 -> 468 us at 256 x 2800, 942 -> 738 us at 512 x 2300
# (2.3-2.5 -> 3.2 TB/s); bf16 pools 767 -> 672 us at 256 x 2800 (4.45 TB/s). Several kv heads per
# program (KV_HEADS) lost everywhere (1.1-1.7x slower). Batches of at most SMALL_BS[fp8] rows take the
# SMALL_KNOBS (bs 1 x 512: 6.8 against 7.4 us bf16, 6.6 against 8.0 fp8). Twentieth session
# (`gpu_decode_tiles.py`, four layers' pools per timed call so K/V come from HBM, lengths uniform in
# [1, 2 x ctx - 1]): over bf16 pools 128-token tiles, 4 warps, 2 stages beat the 64-token knobs at every
# batch of 1-16 rows at the served split counts, us per layer call: 1 x 1024 7.3 -> 6.7, 4 x 2600 23.1 ->
# 19.3, 5 x 2600 24.3 -> 20.4, 6 x 2600 31.0 -> 27.7, 8 x 2560 28.0 -> 25.1, 12 x 2048 47.9 -> 45.3,
# 16 x 2048 55.4 -> 53.1, 6 x 512 13.6 -> 12.0. RADIXLM_KERNEL_DECODE_SMALL="MAX_BS:BLOCK_N,WARPS,STAGES,
# SWAP_AB,SLOTS_AHEAD" overrides the bf16 pair ("4:64,4,3,0,1" is the nineteenth session's).
# RADIXLM_KERNEL_FP8_DECODE="BLOCK_N,WARPS,STAGES,SWAP_AB[,KV_HEADS[,SLOTS_AHEAD]]" overrides them,
# and RADIXLM_KERNEL_DECODE the others' (for A/B runs).
FP8_BLOCK_N = 64
FP8_NUM_WARPS = 2
FP8_NUM_STAGES = 3
FP8_VIA_F16 = True
FP8_SWAP_AB = True
SWAP_AB = False  # the same for bf16/fp16/fp32 pools
KV_HEADS = 1  # kv heads per program (a power of two), bf16/fp16/fp32 pools
FP8_KV_HEADS = 1  # the same for fp8 pools
SLOTS_AHEAD = False  # load the next tile's slot ids one iteration ahead (bf16/fp16/fp32 pools)
FP8_SLOTS_AHEAD = True  # the same for fp8 pools
HEADS_FASTEST = True  # launch a row's (head group, split) programs side by side instead of a head's rows
SMALL_BS = {False: 16, True: 4}  # by fp8: batches of at most this many rows use the knobs below (0: never)
SMALL_KNOBS = {False: (128, 4, 2, False, False), True: (64, 4, 3, True, False)}  # by fp8: BLOCK_N, warps,
# stages, K/V on the left, slots ahead
# the last split program of a (row, head group) merges the splits instead of a second kernel, when the
# grid has 2..FUSED_MERGE_MAX_SPLITS splits (its merge is a serial loop: at 32 splits it lost, 1 x 4096
# 16.7 against 11.1 us; at bs 8 x 2048 with 5 it won, 27.0 against 32.0 us; thirteenth session: up to 32
# splits lost at 1 x 1024-4096 and 2 x 2048 also with the max taken first and the loads unrolled)
FUSED_MERGE = True
FUSED_MERGE_MAX_SPLITS = 8
# a split's length is rounded up to a multiple of the tile (BLOCK_N), so that only a row's last split loads
# a partial tile (nineteenth session, `--splits-only`, bf16, us per layer call, unaligned -> aligned: 8 x 2048
# at 10 splits 32.0 -> 27.6, at 24 33.9 -> 28.6; 16 x 1024 at 12 splits 34.1 -> 28.9)
ALIGN_SPLITS = True
FP8_ALIGN_SPLITS = False  # fp8 pools: 0.3-2 us slower aligned at 5-16 rows (the same sweep)


def _launch_knobs(fp8: bool, bs: int) -> tuple[int, int, int, bool, bool]:
    """(BLOCK_N, warps, stages, K/V on the left, slots ahead) for a batch of `bs` rows over this pool."""
    if bs <= SMALL_BS[fp8]:
        return SMALL_KNOBS[fp8]
    if fp8:
        return FP8_BLOCK_N, FP8_NUM_WARPS, FP8_NUM_STAGES, FP8_SWAP_AB, FP8_SLOTS_AHEAD
    return BLOCK_N, NUM_WARPS, NUM_STAGES, SWAP_AB, SLOTS_AHEAD


def _merge_mode(max_kv_splits: int) -> tuple[bool, bool]:
    """(direct, fused merge) for a grid of `max_kv_splits` splits: with one split the split kernel writes the
    output itself; with 2..FUSED_MERGE_MAX_SPLITS its last program merges; beyond, a merge kernel does."""
    return max_kv_splits == 1, FUSED_MERGE and 1 < max_kv_splits <= FUSED_MERGE_MAX_SPLITS


def decode_launch_variant(bs: int, max_kv_splits: int, kv_dtype: torch.dtype) -> tuple:
    """What picks the compiled kernels of a plain `decode_attention_fwd` launch (no order, cascade or rope;
    splits counted from the lengths) of `bs` rows over a grid of `max_kv_splits` splits: launches that give
    equal values run the same compiled split (and merge) kernels. Lets a server compile each one before
    serving instead of on the first batch that needs it (about 1 s each on a machine with no Triton cache)."""
    fp8 = is_fp8(kv_dtype)
    direct, fused = _merge_mode(max_kv_splits)
    merge_block = 0 if direct or fused else next_power_of_2(max_kv_splits)
    # Triton also specializes the grid_splits argument on being 16-divisible
    return _launch_knobs(fp8, bs), direct, fused, max_kv_splits % 16 == 0, merge_block


def kv_heads_per_program(num_kv_heads: int, kv_dtype: torch.dtype) -> int:
    """How many kv heads one decode program attends (the knob for this pool dtype, at most the
    kv heads there are, rounded up to a power of two)."""
    knob = FP8_KV_HEADS if is_fp8(kv_dtype) else KV_HEADS
    return max(1, min(next_power_of_2(knob), next_power_of_2(num_kv_heads)))


# environment overrides (`radixlm_kernel.environ`), for A/B runs
if (_small := environ.decode_small()) is not None:
    SMALL_BS[False], SMALL_KNOBS[False] = _small
if (_fp8_knobs := environ.decode_knobs(fp8=True)) is not None:
    FP8_BLOCK_N, FP8_NUM_WARPS, FP8_NUM_STAGES, FP8_SWAP_AB, FP8_KV_HEADS, FP8_SLOTS_AHEAD = _fp8_knobs
if (_knobs := environ.decode_knobs(fp8=False)) is not None:
    BLOCK_N, NUM_WARPS, NUM_STAGES, SWAP_AB, KV_HEADS, SLOTS_AHEAD = _knobs


# the split kernel's per-request index arrays: their alignment is left out of its specialization key
SPLIT_ANY_ALIGNMENT = ("req_pool_ptr", "seq_lens_ptr", "splits_ptr", "order_ptr", "pre_len_ptr", "n_pre_ptr", "loc_ptr")


@jit_any_alignment(*SPLIT_ANY_ALIGNMENT)
def _decode_split_kernel(q_ptr, k_buf_ptr, v_buf_ptr, req_to_token_ptr, req_pool_ptr, seq_lens_ptr, splits_ptr,
                         mid_o_ptr, mid_lse_ptr, sm_scale, q_s0, q_s1, kb_s0, kb_s1, vb_s0, vb_s1, r2t_s0,
                         mo_s0, mo_s1, mo_s2, ml_s0, ml_s1, o_ptr, o_s0, o_s1, order_ptr, pre_len_ptr, n_pre_ptr,
                         group, head_dim, v_head_dim, num_kv_heads, BLOCK_H: tl.constexpr, BLOCK_G: tl.constexpr,
                         HEADS: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_N: tl.constexpr,
                         DIRECT_OUT: tl.constexpr,
                         HAS_ORDER: tl.constexpr, CASCADE: tl.constexpr, SPLIT_BASE: tl.constexpr,
                         KV_FP8: tl.constexpr, VIA_F16: tl.constexpr, SWAP_AB: tl.constexpr,
                         SLOTS_AHEAD: tl.constexpr, HEADS_FASTEST: tl.constexpr, FUSED_MERGE: tl.constexpr,
                         count_ptr, cnt_s0, kn_ptr, vn_ptr, loc_ptr, cs_ptr, kn_s0, vn_s0, cs_s0, half, rotary_dim,
                         FUSED_ROPE: tl.constexpr, ROPE_NEOX: tl.constexpr, min_split, grid_splits,
                         SPLITS_FROM_LEN: tl.constexpr, SPLIT_ALIGN: tl.constexpr, USE_PDL: tl.constexpr):
    pdl_begin(USE_PDL)  # see radixlm_kernel.utils.pdl_args
    if HEADS_FASTEST:  # grid (head groups, splits, rows): a row's programs are launched side by side
        pid_b, kv0, split = tl.program_id(2), tl.program_id(0) * HEADS, tl.program_id(1)
    else:  # grid (rows, head groups, splits)
        pid_b, kv0, split = tl.program_id(0), tl.program_id(1) * HEADS, tl.program_id(2)
    if HAS_ORDER:  # the launch order of the rows (see `decode_attention_fwd`)
        b = tl.load(order_ptr + pid_b).to(tl.int64)
    else:
        b = pid_b.to(tl.int64)
    seq_len = tl.load(seq_lens_ptr + b).to(tl.int32)
    ctx_start = 0
    if CASCADE:  # [0, P) is the cascade prefix kernel's
        ctx_start = tl.load(pre_len_ptr + b).to(tl.int32)
    num_splits = _row_splits(splits_ptr, b, seq_len - ctx_start, min_split, grid_splits, SPLITS_FROM_LEN)
    split_len = _split_len(seq_len - ctx_start, num_splits, SPLIT_ALIGN)
    start = ctx_start + split * split_len
    end = tl.minimum(start + split_len, seq_len)
    if (split < num_splits) & (start < end):
        row = tl.load(req_pool_ptr + b).to(tl.int64)
        r = tl.arange(0, BLOCK_H)  # row r: q head r % BLOCK_G of kv head kv0 + r // BLOCK_G
        r_kv = r // BLOCK_G
        heads = (kv0 + r_kv) * group + r % BLOCK_G
        h_mask = (r % BLOCK_G < group) & (r_kv < HEADS) & (kv0 + r_kv < num_kv_heads)
        k_kv, d, k_ok, k_off = _head_columns(kv0, num_kv_heads, kb_s1, head_dim, HEADS, BLOCK_D)
        v_kv, dv, v_ok, v_off = _head_columns(kv0, num_kv_heads, vb_s1, v_head_dim, HEADS, BLOCK_DV)
        q_mask = h_mask[:, None] & k_ok[None, :] & (r_kv[:, None] == k_kv[None, :])  # block-diagonal q
        o_mask = h_mask[:, None] & v_ok[None, :] & (r_kv[:, None] == v_kv[None, :])
        if FUSED_ROPE:  # q arrives un-rotated; the split holding the new token also stores its k/v first
            pos = (seq_len - 1).to(tl.int64)
            q = rope_load(q_ptr + b * q_s0, heads[:, None] * q_s1 + d[None, :], d[None, :], q_mask, cs_ptr, pos,
                          cs_s0, half, rotary_dim, ROPE_NEOX)
            if end == seq_len:
                store_new_kv(kn_ptr, vn_ptr, kn_s0, vn_s0, k_buf_ptr, v_buf_ptr, kb_s0, vb_s0,
                             tl.load(loc_ptr + b).to(tl.int64), b, kv0, k_kv, d, k_ok, k_off, v_kv, dv, v_ok, v_off,
                             head_dim, v_head_dim, cs_ptr, pos, cs_s0, half, rotary_dim, ROPE_NEOX)
                tl.debug_barrier()  # every thread's store is in before the tile loop reads the pool
        else:
            q = tl.load(q_ptr + b * q_s0 + heads[:, None] * q_s1 + d[None, :], mask=q_mask, other=0.0)
        if VIA_F16:  # an fp8 pool read up to float16
            q = q.to(tl.float16)
        elif not KV_FP8:  # fp8 pools are read up to q's dtype instead
            q = q.to(k_buf_ptr.dtype.element_ty)
        if SWAP_AB:
            acc, m, l = _attend_kv_left(q, k_buf_ptr, v_buf_ptr, req_to_token_ptr, row, r2t_s0, start, end, kb_s0,
                                        vb_s0, k_off, k_ok, v_off, v_ok, sm_scale, BLOCK_H, HEADS * BLOCK_DV, BLOCK_N,
                                        KV_FP8, SLOTS_AHEAD)
        else:
            acc, m, l = _attend_q_left(q, k_buf_ptr, v_buf_ptr, req_to_token_ptr, row, r2t_s0, start, end, kb_s0,
                                       vb_s0, k_off, k_ok, v_off, v_ok, sm_scale, BLOCK_H, HEADS * BLOCK_DV, BLOCK_N,
                                       KV_FP8, SLOTS_AHEAD)
        out = acc / l[:, None]
        if DIRECT_OUT:  # one split per request: this is the final output, no merge pass
            if CASCADE:  # fold in the prefix partials the cascade kernel wrote before this launch
                out = _fold_prefix(out, m + tl.log(l), mid_o_ptr, mid_lse_ptr, b, heads, h_mask, dv, o_mask,
                                   tl.load(pre_len_ptr + b), tl.load(n_pre_ptr + b), mo_s0, mo_s1, mo_s2, ml_s0,
                                   ml_s1)
            tl.store(o_ptr + b * o_s0 + heads[:, None] * o_s1 + dv[None, :], out.to(o_ptr.dtype.element_ty),
                     mask=o_mask)
        else:
            out_ptrs = mid_o_ptr + b * mo_s0 + heads[:, None] * mo_s1 + (SPLIT_BASE + split) * mo_s2 + dv[None, :]
            tl.store(out_ptrs, out, mask=o_mask)
            tl.store(mid_lse_ptr + b * ml_s0 + heads * ml_s1 + SPLIT_BASE + split, m + tl.log(l), mask=h_mask)
            if FUSED_MERGE:  # the row's last split program to finish merges the partials (no merge launch)
                tl.debug_barrier()  # every thread's partial is stored before the arrival is counted
                counter = count_ptr + b * cnt_s0 + kv0 // HEADS
                arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
                active = tl.cdiv(seq_len - ctx_start, split_len)  # the splits that have tokens
                if arrived == active - 1:
                    tl.store(counter, 0)  # ready for the next launch (the next layer, the next replay)
                    merged, lse = _merge_splits(mid_o_ptr, mid_lse_ptr, b, heads, h_mask, dv, o_mask, SPLIT_BASE,
                                                active, mo_s0, mo_s1, mo_s2, ml_s0, ml_s1, BLOCK_H, HEADS * BLOCK_DV)
                    if CASCADE:
                        merged = _fold_prefix(merged, lse, mid_o_ptr, mid_lse_ptr, b, heads, h_mask, dv, o_mask,
                                              tl.load(pre_len_ptr + b), tl.load(n_pre_ptr + b), mo_s0, mo_s1, mo_s2,
                                              ml_s0, ml_s1)
                    tl.store(o_ptr + b * o_s0 + heads[:, None] * o_s1 + dv[None, :],
                             merged.to(o_ptr.dtype.element_ty), mask=o_mask)


@triton.jit
def _row_splits(splits_ptr, b, own_len, min_split, grid_splits, FROM_LEN: tl.constexpr):
    """Row b's split count: from `splits_ptr`, or (FROM_LEN) what `compute_num_kv_splits` gives for
    `own_len` tokens under a grid of `grid_splits` (`min_split`: decode_splits.MIN_SPLIT_LEN)."""
    if FROM_LEN:
        return tl.minimum(tl.maximum(tl.cdiv(own_len, min_split), 1), grid_splits)
    return tl.load(splits_ptr + b).to(tl.int32)


@triton.jit
def _split_len(own_len, num_splits, ALIGN: tl.constexpr):
    """Tokens per split of a row's `own_len`, rounded up to a multiple of ALIGN (the tile) so that only
    the row's last split ends in a partial tile; cdiv(own_len, split_len) <= num_splits splits then
    hold tokens, and the others exit at once."""
    return tl.cdiv(tl.cdiv(own_len, num_splits), ALIGN) * ALIGN


@triton.jit
def _merge_splits(mid_o_ptr, mid_lse_ptr, b, heads, h_mask, dv, o_mask, base, n, mo_s0, mo_s1, mo_s2, ml_s0, ml_s1,
                  BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """The normalized merge of split partials in slots [base, base + n) of row b, and its log-sum-exp.
    Loads bypass L1 (`.cg`): other programs wrote these partials during this launch."""
    num = tl.zeros([BLOCK_H, BLOCK_W], dtype=tl.float32)
    den = tl.zeros([BLOCK_H], dtype=tl.float32)
    mx = tl.full([BLOCK_H], -1e30, dtype=tl.float32)
    for s in range(0, n):
        lse_s = tl.load(mid_lse_ptr + b * ml_s0 + heads * ml_s1 + base + s, mask=h_mask, other=-1e30,
                        cache_modifier=".cg")
        o_s = tl.load(mid_o_ptr + b * mo_s0 + heads[:, None] * mo_s1 + (base + s) * mo_s2 + dv[None, :], mask=o_mask,
                      other=0.0, cache_modifier=".cg")
        num, den, mx = _combine(num, den, mx, o_s, lse_s)
    den = tl.where(den > 0, den, 1.0)
    return num / den[:, None], mx + tl.log(den)


@triton.jit
def _head_columns(kv0, num_kv_heads, head_stride, dim, HEADS: tl.constexpr, BLOCK: tl.constexpr):
    """The columns of HEADS kv heads' rows side by side, from head kv0: per column, its head (0..HEADS-1),
    its index inside the head, whether it is real, and its offset from a token's row in the pool."""
    c = tl.arange(0, HEADS * BLOCK)
    c_kv = c // BLOCK
    c_d = c % BLOCK
    ok = (c_d < dim) & (kv0 + c_kv < num_kv_heads)
    return c_kv, c_d, ok, (kv0 + c_kv) * head_stride + c_d


@triton.jit
def _tile_slots(req_to_token_ptr, row, r2t_s0, n0, end, BLOCK_N: tl.constexpr):
    """The pool slots of context positions [n0, n0 + BLOCK_N) of request row `row`, and which are < end."""
    n = n0 + tl.arange(0, BLOCK_N)
    n_mask = n < end
    return n_mask, tl.load(req_to_token_ptr + row * r2t_s0 + n, mask=n_mask, other=0).to(tl.int64)


@triton.jit
def _attend_q_left(q, k_buf_ptr, v_buf_ptr, req_to_token_ptr, row, r2t_s0, start, end, kb_s0, vb_s0, k_off, k_ok,
                   v_off, v_ok, sm_scale, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr,
                   KV_FP8: tl.constexpr, SLOTS_AHEAD: tl.constexpr):
    """Online softmax over context [start, end) with q as the left operand: s = q K^T, acc += p V.
    A token's K (V) columns are at `k_off` (`v_off`) from its slot's row, real where `k_ok` (`v_ok`).
    Returns (acc [BLOCK_H, BLOCK_W], running max, running sum), float32."""
    m = tl.full([BLOCK_H], -1e30, dtype=tl.float32)
    l = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_W], dtype=tl.float32)
    next_mask, next_slots = _tile_slots(req_to_token_ptr, row, r2t_s0, start, end, BLOCK_N)
    for n0 in range(start, end, BLOCK_N):
        if SLOTS_AHEAD:  # this tile's slots were loaded last iteration; load the next tile's now
            n_mask, slots = next_mask, next_slots
            next_mask, next_slots = _tile_slots(req_to_token_ptr, row, r2t_s0, n0 + BLOCK_N, end, BLOCK_N)
        else:
            n_mask, slots = _tile_slots(req_to_token_ptr, row, r2t_s0, n0, end, BLOCK_N)
        k = tl.load(k_buf_ptr + slots[None, :] * kb_s0 + k_off[:, None], mask=n_mask[None, :] & k_ok[:, None],
                    other=0.0)
        if KV_FP8:
            k = k.to(q.dtype)
        s = tl.dot(q, k).to(tl.float32) * sm_scale
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        v = tl.load(v_buf_ptr + slots[:, None] * vb_s0 + v_off[None, :], mask=n_mask[:, None] & v_ok[None, :],
                    other=0.0)
        if KV_FP8:
            v = v.to(q.dtype)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
        l = l * alpha + tl.sum(p, axis=1)
        m = m_new
    return acc, m, l


@triton.jit
def _attend_kv_left(q, k_buf_ptr, v_buf_ptr, req_to_token_ptr, row, r2t_s0, start, end, kb_s0, vb_s0, k_off, k_ok,
                    v_off, v_ok, sm_scale, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr,
                    KV_FP8: tl.constexpr, SLOTS_AHEAD: tl.constexpr):
    """The same with the K/V tiles as the left operand (s^T = K q^T, acc^T += V^T p^T), so an fp8 tile
    is converted in the left operand's registers; the transposes are of the small q and acc only."""
    qt = tl.trans(q)
    m = tl.full([BLOCK_H], -1e30, dtype=tl.float32)
    l = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc_t = tl.zeros([BLOCK_W, BLOCK_H], dtype=tl.float32)
    next_mask, next_slots = _tile_slots(req_to_token_ptr, row, r2t_s0, start, end, BLOCK_N)
    for n0 in range(start, end, BLOCK_N):
        if SLOTS_AHEAD:  # this tile's slots were loaded last iteration; load the next tile's now
            n_mask, slots = next_mask, next_slots
            next_mask, next_slots = _tile_slots(req_to_token_ptr, row, r2t_s0, n0 + BLOCK_N, end, BLOCK_N)
        else:
            n_mask, slots = _tile_slots(req_to_token_ptr, row, r2t_s0, n0, end, BLOCK_N)
        k = tl.load(k_buf_ptr + slots[:, None] * kb_s0 + k_off[None, :], mask=n_mask[:, None] & k_ok[None, :],
                    other=0.0)
        if KV_FP8:
            k = k.to(q.dtype)
        st = tl.dot(k, qt).to(tl.float32) * sm_scale
        st = tl.where(n_mask[:, None], st, float("-inf"))
        m_new = tl.maximum(m, tl.max(st, axis=0))
        alpha = tl.exp(m - m_new)
        pt = tl.exp(st - m_new[None, :])
        vt = tl.load(v_buf_ptr + slots[None, :] * vb_s0 + v_off[:, None], mask=n_mask[None, :] & v_ok[:, None],
                     other=0.0)
        if KV_FP8:
            vt = vt.to(q.dtype)
        acc_t = acc_t * alpha[None, :] + tl.dot(vt, pt.to(vt.dtype)).to(tl.float32)
        l = l * alpha + tl.sum(pt, axis=0)
        m = m_new
    return tl.trans(acc_t), m, l


@triton.jit
def _fold_prefix(out, lse, mid_o_ptr, mid_lse_ptr, b, heads, h_mask, dv, o_mask, prefix, n_pre, mo_s0, mo_s1,
                 mo_s2, ml_s0, ml_s1):
    """Merge a request's own normalized output `out` (log-sum-exp `lse`) with its `n_pre` prefix
    partials in split slots 0.. (a split is empty when it starts past the prefix); `o_mask` marks
    the entries of `out` that are real (row `heads`, column `dv`)."""
    num = out
    den = lse * 0.0 + 1.0
    mx = lse
    split_len = tl.cdiv(prefix, tl.maximum(n_pre, 1))
    for s in range(0, n_pre):
        if s * split_len < prefix:
            lse_s = tl.load(mid_lse_ptr + b * ml_s0 + heads * ml_s1 + s, mask=h_mask, other=0.0)
            o_s = tl.load(mid_o_ptr + b * mo_s0 + heads[:, None] * mo_s1 + s * mo_s2 + dv[None, :], mask=o_mask,
                          other=0.0)
            num, den, mx = _combine(num, den, mx, o_s, lse_s)
    return num / den[:, None]


@triton.jit
def _combine(num, den, mx, o_s, lse_s):
    """One step of a log-sum-exp merge: fold partial `o_s` (normalized, log-sum-exp `lse_s`) into the
    running numerator, denominator and max."""
    mx_new = tl.maximum(mx, lse_s)
    a = tl.exp(mx - mx_new)
    c = tl.exp(lse_s - mx_new)
    return num * a[:, None] + o_s * c[:, None], den * a + c, mx_new


MERGE_ANY_ALIGNMENT = ("seq_lens_ptr", "splits_ptr", "pre_len_ptr", "n_pre_ptr")


@jit_any_alignment(*MERGE_ANY_ALIGNMENT)
def _decode_merge_kernel(mid_o_ptr, mid_lse_ptr, o_ptr, seq_lens_ptr, splits_ptr, pre_len_ptr, n_pre_ptr, mo_s0,
                         mo_s1, mo_s2, ml_s0, ml_s1, o_s0, o_s1, v_head_dim, BLOCK_S: tl.constexpr,
                         BLOCK_DV: tl.constexpr, CASCADE: tl.constexpr, SPLIT_BASE: tl.constexpr, min_split,
                         grid_splits, SPLITS_FROM_LEN: tl.constexpr, SPLIT_ALIGN: tl.constexpr,
                         USE_PDL: tl.constexpr):
    pdl_begin(USE_PDL)  # see radixlm_kernel.utils.pdl_args
    b = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    seq_len = tl.load(seq_lens_ptr + b).to(tl.int32)
    s = tl.arange(0, BLOCK_S)
    if CASCADE:  # slots [0, SPLIT_BASE) hold the prefix [0, P); the request's own splits follow
        prefix = tl.load(pre_len_ptr + b).to(tl.int32)
        num_splits = _row_splits(splits_ptr, b, seq_len - prefix, min_split, grid_splits, SPLITS_FROM_LEN)
        n_pre = tl.load(n_pre_ptr + b).to(tl.int32)
        pre_split = tl.cdiv(prefix, tl.maximum(n_pre, 1))
        own = s - SPLIT_BASE
        split_len = _split_len(seq_len - prefix, num_splits, SPLIT_ALIGN)
        valid = tl.where(s < SPLIT_BASE, (s < n_pre) & (s * pre_split < prefix),
                         (own >= 0) & (own < num_splits) & (own * split_len < seq_len - prefix))
    else:
        num_splits = _row_splits(splits_ptr, b, seq_len, min_split, grid_splits, SPLITS_FROM_LEN)
        split_len = _split_len(seq_len, num_splits, SPLIT_ALIGN)
        valid = (s < num_splits) & (s * split_len < seq_len)
    dv = tl.arange(0, BLOCK_DV)
    lse = tl.load(mid_lse_ptr + b * ml_s0 + head * ml_s1 + s, mask=valid, other=float("-inf"))
    m = tl.max(lse, axis=0)
    w = tl.where(valid, tl.exp(lse - m), 0.0)
    parts = tl.load(mid_o_ptr + b * mo_s0 + head * mo_s1 + s[:, None] * mo_s2 + dv[None, :],
                    mask=valid[:, None] & (dv[None, :] < v_head_dim), other=0.0)
    total = tl.sum(w, axis=0)
    out = tl.sum(parts * w[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(o_ptr + b * o_s0 + head * o_s1 + dv, out.to(o_ptr.dtype.element_ty), mask=dv < v_head_dim)


def _as_heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """`[T, H*D]` or `[T, H, D]` -> a `[T, H, D]` view with a unit last stride."""
    view = x.view(x.shape[0], -1, head_dim) if x.dim() == 2 else x
    if view.stride(-1) != 1:
        raise ValueError(f"expected a unit last stride, got strides {x.stride()}")
    return view


def decode_attention_fwd(q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, o: torch.Tensor,
                         req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                         num_kv_splits: Union[torch.Tensor, int, None], sm_scale: float,
                         max_kv_splits: Optional[int] = None, attn_logits: Optional[torch.Tensor] = None,
                         attn_lse: Optional[torch.Tensor] = None, order: Optional[torch.Tensor] = None,
                         cascade: Optional["CascadePlan"] = None, num_sms: Optional[int] = None,
                         split_counters: Optional[torch.Tensor] = None, rope: Optional[DecodeRope] = None) -> None:
    """One new token per request attends to its whole context; writes `o`.

    q `[bs, Hq*D]` or `[bs, Hq, D]`; k/v_buffer `[slots, Hk, D/Dv]`; o `[bs, Hq*Dv]` or `[bs, Hq, Dv]`;
    num_kv_splits: int32 [bs] device tensor (see `compute_num_kv_splits`), one int for all, or None:
    the kernels then give each request what `compute_num_kv_splits` would under this grid (no launch
    to compute them); max_kv_splits: the grid's split dimension (defaults to the int, else 16; must
    be >= every num_kv_splits[b]; with 1, stage 1 writes `o` directly and the merge is skipped); attn_logits
    `[>=bs, Hq, max_kv_splits, Dv]` and attn_lse `[>=bs, Hq, max_kv_splits]` float32 are the
    scratch buffers (pass static ones under a CUDA graph; allocated when None). `order` (a
    permutation of the batch rows, see `prefix_order` and `longest_first_order`) sets the order in
    which requests' programs are launched; the result does not depend on it. With FUSED_MERGE,
    `split_counters` (int32 `[>=bs, >=kv heads]`, zeros; the kernel leaves them zero) counts the
    splits that have finished, so the last one merges; pass a static one under a CUDA graph.

    With `rope` (a `DecodeRope`), q is not rotated yet: the kernel rotates q and the new k at position
    `seq_lens - 1` and writes the new k/v into the pool at `rope.loc` before attending (no cascade).

    With `cascade` (a `cascade_plan` of this batch), each request's shared prefix `[0, pre_len)` is
    attended once per block of requests by the cascade kernel and `num_kv_splits` splits the rest,
    `[pre_len, seq_len)`; the scratch then needs `PREFIX_SPLITS + max_kv_splits` split slots.
    """
    head_dim, v_head_dim = k_buffer.shape[-1], v_buffer.shape[-1]
    q3, o3 = _as_heads(q, head_dim), _as_heads(o, v_head_dim)
    bs, num_q_heads, num_kv_heads = q3.shape[0], q3.shape[1], k_buffer.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} q heads are not a multiple of {num_kv_heads} kv heads")
    if isinstance(num_kv_splits, int):
        max_kv_splits = max_kv_splits or num_kv_splits
        num_kv_splits = torch.full((bs,), num_kv_splits, dtype=torch.int32, device=q.device)
    max_kv_splits = max_kv_splits or 16
    from_len = num_kv_splits is None
    splits_arg = seq_lens if from_len else num_kv_splits
    if bs == 0:
        return
    if rope is not None:
        if cascade is not None:
            raise ValueError("rope= cannot be combined with cascade= (the cascade kernel reads the pool first)")
        rope.check(bs, k_buffer, v_buffer)
    base = 0
    if cascade is not None:
        from radixlm_kernel.cascade_attention import PREFIX_SPLITS

        base = PREFIX_SPLITS
    slots = base + max_kv_splits
    attn_logits, attn_lse = _split_scratch(attn_logits, attn_lse, bs, num_q_heads, slots, v_head_dim, q.device)
    if cascade is not None:
        from radixlm_kernel.cascade_attention import cascade_prefix_fwd

        cascade_prefix_fwd(q3, k_buffer, v_buffer, req_to_token, cascade, sm_scale, attn_logits, attn_lse,
                           num_sms or decode_splits.num_sms_of(q.device))
    pre_len = cascade.pre_len if cascade is not None else seq_lens
    n_pre = cascade.n_pre if cascade is not None else seq_lens
    group = num_q_heads // num_kv_heads
    # direct: every request has exactly one split (num_kv_splits <= the grid's)
    direct, fused_merge = _merge_mode(max_kv_splits)
    fp8 = is_fp8(k_buffer.dtype)
    block_n, warps, stages, swap, ahead = _launch_knobs(fp8, bs)
    align = block_n if (FP8_ALIGN_SPLITS if fp8 else ALIGN_SPLITS) and max_kv_splits > 1 else 1
    heads = kv_heads_per_program(num_kv_heads, k_buffer.dtype)
    block_g = next_power_of_2(group)
    groups = triton.cdiv(num_kv_heads, heads)
    grid = (groups, max_kv_splits, bs) if HEADS_FASTEST else (bs, groups, max_kv_splits)
    if fused_merge:
        split_counters = _split_counters(split_counters, bs, groups, q.device)
    unread = k_buffer  # stands in for the pointers this launch never reads (see `_rope_args`)
    _decode_split_kernel[grid](
        q3, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, splits_arg, attn_logits, attn_lse,
        sm_scale, q3.stride(0), q3.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0),
        v_buffer.stride(1), req_to_token.stride(0), attn_logits.stride(0), attn_logits.stride(1),
        attn_logits.stride(2), attn_lse.stride(0), attn_lse.stride(1), o3, o3.stride(0), o3.stride(1),
        order if order is not None else seq_lens, pre_len, n_pre, group, head_dim, v_head_dim, num_kv_heads,
        BLOCK_H=max(16, heads * block_g), BLOCK_G=block_g, HEADS=heads, BLOCK_D=next_power_of_2(head_dim),
        BLOCK_DV=next_power_of_2(v_head_dim), BLOCK_N=block_n, DIRECT_OUT=direct, HAS_ORDER=order is not None,
        CASCADE=cascade is not None, SPLIT_BASE=base, KV_FP8=fp8, VIA_F16=fp8 and FP8_VIA_F16,
        SWAP_AB=swap, SLOTS_AHEAD=ahead,
        HEADS_FASTEST=HEADS_FASTEST, FUSED_MERGE=fused_merge,
        count_ptr=split_counters if fused_merge else unread,
        cnt_s0=split_counters.stride(0) if fused_merge else 0, **_rope_args(rope, unread),
        min_split=decode_splits.MIN_SPLIT_LEN, grid_splits=max_kv_splits, SPLITS_FROM_LEN=from_len,
        SPLIT_ALIGN=align, num_warps=warps, num_stages=stages, **pdl_args(q))
    if direct or fused_merge:
        return
    _decode_merge_kernel[(bs, num_q_heads)](
        attn_logits, attn_lse, o3, seq_lens, splits_arg, pre_len, n_pre, attn_logits.stride(0),
        attn_logits.stride(1), attn_logits.stride(2), attn_lse.stride(0), attn_lse.stride(1), o3.stride(0),
        o3.stride(1), v_head_dim, BLOCK_S=next_power_of_2(slots), BLOCK_DV=next_power_of_2(v_head_dim),
        CASCADE=cascade is not None, SPLIT_BASE=base, min_split=decode_splits.MIN_SPLIT_LEN,
        grid_splits=max_kv_splits, SPLITS_FROM_LEN=from_len, SPLIT_ALIGN=align, num_warps=4, **pdl_args(q))


def _split_scratch(attn_logits: Optional[torch.Tensor], attn_lse: Optional[torch.Tensor], bs: int, num_q_heads: int,
                   slots: int, v_head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The split kernel's partial outputs and log-sum-exps: the caller's (checked to fit), else new ones."""
    if attn_logits is None:
        attn_logits = torch.empty((bs, num_q_heads, slots, v_head_dim), dtype=torch.float32, device=device)
    if attn_lse is None:
        attn_lse = torch.empty((bs, num_q_heads, slots), dtype=torch.float32, device=device)
    if (attn_logits.shape[0] < bs or attn_logits.shape[1] != num_q_heads or attn_logits.shape[2] < slots
            or attn_lse.shape[0] < bs or attn_lse.shape[1] != num_q_heads or attn_lse.shape[2] < slots):
        raise ValueError(f"scratch buffers {tuple(attn_logits.shape)} / {tuple(attn_lse.shape)} do not fit "
                         f"bs {bs}, {num_q_heads} q heads, {slots} splits")
    return attn_logits, attn_lse


def _split_counters(counters: Optional[torch.Tensor], bs: int, groups: int, device: torch.device) -> torch.Tensor:
    """The fused merge's finished-split counters: the caller's (checked to fit), else new zeros."""
    if counters is None:
        return torch.zeros((bs, groups), dtype=torch.int32, device=device)
    if counters.shape[0] < bs or counters.shape[1] < groups or counters.dtype != torch.int32:
        raise ValueError(f"split_counters {tuple(counters.shape)} {counters.dtype} do not fit bs {bs}, "
                         f"{groups} head groups (int32, zeros between launches)")
    return counters


def _rope_args(rope: Optional[DecodeRope], placeholder: torch.Tensor) -> dict:
    """The split kernel's rope arguments; without `rope`, `placeholder` (never read) stands in for the tensors,
    as it does for the fused merge's counters without that merge. Triton keys its compiles on a pointer's
    16-byte alignment, so the placeholder must be a tensor whose alignment never changes between launches (the
    pool's k buffer), not a per-batch slice such as seq_lens:
    an extend's last-query launch with a misaligned seq_lens compiled a variant of its own (~1 s) inside a
    timed run (RESULTS.md, thirty-sixth session)."""
    if rope is None:
        return dict(kn_ptr=placeholder, vn_ptr=placeholder, loc_ptr=placeholder, cs_ptr=placeholder, kn_s0=0,
                    vn_s0=0, cs_s0=0, half=1, rotary_dim=0, FUSED_ROPE=False, ROPE_NEOX=True)
    cache = rope.cos_sin_cache
    return dict(kn_ptr=rope.k, vn_ptr=rope.v, loc_ptr=rope.loc, cs_ptr=cache, kn_s0=rope.k.stride(0),
                vn_s0=rope.v.stride(0), cs_s0=cache.stride(0), half=cache.shape[1] // 2, rotary_dim=cache.shape[1],
                FUSED_ROPE=True, ROPE_NEOX=bool(rope.is_neox))
