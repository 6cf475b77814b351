"""Decode attention with the work split evenly over a fixed grid of programs (opt-in, for A/B runs).

`decode_attention_fwd` gives each (request, kv head) the same number of splits, so a batch of a few
requests with unequal contexts ends on its longest rows' splits, and each split program pays its own
start (q, slot ids, the first tile's latency) for one or two tiles. Here the batch's work is cut into
tiles of BLOCK_N tokens per (request, kv head) segment, laid end to end (request-major, then kv head),
and program c of C takes tiles [c*W//C, (c+1)*W//C) of the W there are: every program streams the same
number of tiles (to one), whatever the lengths. A program's range may cross segments; each part it
attends becomes one partial (a "chunk") of that segment, written at the chunk's index among the
programs covering the segment. A merge kernel, one program per (request, q head), folds a segment's
chunks. C is fixed by the caller (a multiple of the SM count), so a CUDA graph can record the launch:
every length is read on the device.

A segment spread over the programs has at most ceil(C / kv heads) + 1 chunks, so the scratch needs
that many split slots (`max_chunks`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixlm_kernel.decode_attention import _as_heads, _attend_q_left, _head_columns
from radixlm_kernel.utils import next_power_of_2, pdl_args, pdl_begin

BLOCK_N = 128
NUM_WARPS = 4
NUM_STAGES = 2
PROGRAMS_PER_SM = 1
SLOTS_AHEAD = False  # load the next tile's slot ids one iteration ahead


@triton.jit
def _layout(seq_lens_ptr, bs, num_kv_heads, C, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr):
    """Per row: its length, its tile count and where its first segment starts among the W tiles; and W."""
    i = tl.arange(0, BLOCK_B)
    lens = tl.load(seq_lens_ptr + i, mask=i < bs, other=0).to(tl.int32)
    lens = tl.maximum(lens, 0)
    tiles = tl.cdiv(lens, BLOCK_N)
    starts = (tl.cumsum(tiles, axis=0) - tiles) * num_kv_heads
    total = tl.sum(tiles, axis=0) * num_kv_heads
    return i, lens, tiles, starts, total


@triton.jit
def _owner(x, C, W):
    """The program whose tile range [c*W//C, (c+1)*W//C) holds tile x."""
    return ((x + 1) * C - 1) // tl.maximum(W, 1)


@triton.jit
def _pick(i, values, b):
    return tl.sum(tl.where(i == b, values, 0), axis=0)


@triton.jit
def _balanced_kernel(q_ptr, k_buf_ptr, v_buf_ptr, req_to_token_ptr, req_pool_ptr, seq_lens_ptr, mid_o_ptr,
                     mid_lse_ptr, sm_scale, bs, q_s0, q_s1, kb_s0, kb_s1, vb_s0, vb_s1, r2t_s0, mo_s0, mo_s1, mo_s2,
                     ml_s0, ml_s1, group, head_dim, v_head_dim, num_kv_heads, BLOCK_B: tl.constexpr,
                     BLOCK_H: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
                     BLOCK_N: tl.constexpr, SLOTS_AHEAD: tl.constexpr, USE_PDL: tl.constexpr):
    pdl_begin(USE_PDL)
    c = tl.program_id(0)
    C = tl.num_programs(0)
    i, lens, tiles, starts, W = _layout(seq_lens_ptr, bs, num_kv_heads, C, BLOCK_B, BLOCK_N)
    t = (c * W) // C
    t1 = ((c + 1) * W) // C
    r = tl.arange(0, BLOCK_H)  # row r: q head r of the segment's kv head (rows >= group are padding)
    h_mask = r < group
    while t < t1:
        b = tl.sum(((starts <= t) & (i < bs)).to(tl.int32), axis=0) - 1
        seg_tiles = _pick(i, tiles, b)
        row_start = _pick(i, starts, b)
        seq_len = _pick(i, lens, b)
        kv = (t - row_start) // seg_tiles
        j = (t - row_start) % seg_tiles
        j_end = tl.minimum(seg_tiles, j + (t1 - t))
        b64 = b.to(tl.int64)
        row = tl.load(req_pool_ptr + b64).to(tl.int64)
        heads = kv * group + r
        k_kv, d, k_ok, k_off = _head_columns(kv, num_kv_heads, kb_s1, head_dim, 1, BLOCK_D)
        v_kv, dv, v_ok, v_off = _head_columns(kv, num_kv_heads, vb_s1, v_head_dim, 1, BLOCK_DV)
        q = tl.load(q_ptr + b64 * q_s0 + heads[:, None] * q_s1 + d[None, :], mask=h_mask[:, None] & k_ok[None, :],
                    other=0.0).to(k_buf_ptr.dtype.element_ty)
        acc, m, l = _attend_q_left(q, k_buf_ptr, v_buf_ptr, req_to_token_ptr, row, r2t_s0, j * BLOCK_N,
                                   tl.minimum(j_end * BLOCK_N, seq_len), kb_s0, vb_s0, k_off, k_ok, v_off, v_ok,
                                   sm_scale, BLOCK_H, BLOCK_DV, BLOCK_N, False, SLOTS_AHEAD)
        seg_start = row_start + kv * seg_tiles
        chunk = c - _owner(seg_start, C, W)
        o_mask = h_mask[:, None] & v_ok[None, :]
        tl.store(mid_o_ptr + b64 * mo_s0 + heads[:, None] * mo_s1 + chunk * mo_s2 + dv[None, :], acc / l[:, None],
                 mask=o_mask)
        tl.store(mid_lse_ptr + b64 * ml_s0 + heads * ml_s1 + chunk, m + tl.log(l), mask=h_mask)
        t += j_end - j


@triton.jit
def _balanced_merge_kernel(mid_o_ptr, mid_lse_ptr, o_ptr, seq_lens_ptr, bs, C, mo_s0, mo_s1, mo_s2, ml_s0, ml_s1,
                           o_s0, o_s1, group, v_head_dim, num_kv_heads, BLOCK_B: tl.constexpr,
                           BLOCK_S: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_N: tl.constexpr,
                           USE_PDL: tl.constexpr):
    pdl_begin(USE_PDL)
    b = tl.program_id(0)
    head = tl.program_id(1)
    i, lens, tiles, starts, W = _layout(seq_lens_ptr, bs, num_kv_heads, C, BLOCK_B, BLOCK_N)
    seg_tiles = _pick(i, tiles, b)
    seg_start = _pick(i, starts, b) + (head // group) * seg_tiles
    n = tl.where(seg_tiles > 0, _owner(seg_start + seg_tiles - 1, C, W) - _owner(seg_start, C, W) + 1, 0)
    s = tl.arange(0, BLOCK_S)
    valid = s < n
    dv = tl.arange(0, BLOCK_DV)
    b64 = b.to(tl.int64)
    lse = tl.load(mid_lse_ptr + b64 * ml_s0 + head * ml_s1 + s, mask=valid, other=float("-inf"))
    mx = tl.max(lse, axis=0)
    w = tl.where(valid, tl.exp(lse - mx), 0.0)
    parts = tl.load(mid_o_ptr + b64 * mo_s0 + head * mo_s1 + s[:, None] * mo_s2 + dv[None, :],
                    mask=valid[:, None] & (dv[None, :] < v_head_dim), other=0.0)
    total = tl.sum(w, axis=0)
    out = tl.sum(parts * w[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(o_ptr + b64 * o_s0 + head * o_s1 + dv, out.to(o_ptr.dtype.element_ty), mask=dv < v_head_dim)


def max_chunks(programs: int, num_kv_heads: int) -> int:
    """The most chunks one (request, kv head) segment can be cut into by `programs` programs."""
    return triton.cdiv(programs, num_kv_heads) + 1


def programs_for(device: torch.device) -> int:
    """The grid: PROGRAMS_PER_SM programs per SM (8 SMs' worth on the CPU)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 8
    return PROGRAMS_PER_SM * sms


def decode_attention_balanced_fwd(q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor,
                                  o: torch.Tensor, req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                                  seq_lens: torch.Tensor, sm_scale: float, programs: int | None = None,
                                  attn_logits: torch.Tensor | None = None,
                                  attn_lse: torch.Tensor | None = None) -> None:
    """What `decode_attention_fwd` computes (q `[bs, Hq*D]` or `[bs, Hq, D]`, K/V already in the pool),
    with the work cut evenly over `programs` programs (default `programs_for(q.device)`). Scratch:
    attn_logits `[>=bs, Hq, >=max_chunks(programs, Hk), Dv]` and attn_lse `[>=bs, Hq, >=max_chunks]`,
    float32 (pass static ones under a CUDA graph). bf16/fp16/fp32 pools only."""
    head_dim, v_head_dim = k_buffer.shape[-1], v_buffer.shape[-1]
    q3, o3 = _as_heads(q, head_dim), _as_heads(o, v_head_dim)
    bs, num_q_heads, num_kv_heads = q3.shape[0], q3.shape[1], k_buffer.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} q heads are not a multiple of {num_kv_heads} kv heads")
    if k_buffer.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        raise ValueError("decode_attention_balanced_fwd reads bf16/fp16/fp32 pools only")
    if bs == 0:
        return
    programs = programs or programs_for(q.device)
    slots = max_chunks(programs, num_kv_heads)
    if attn_logits is None:
        attn_logits = torch.empty((bs, num_q_heads, slots, v_head_dim), dtype=torch.float32, device=q.device)
    if attn_lse is None:
        attn_lse = torch.empty((bs, num_q_heads, slots), dtype=torch.float32, device=q.device)
    if attn_logits.shape[0] < bs or attn_logits.shape[2] < slots or attn_lse.shape[2] < slots:
        raise ValueError(f"scratch buffers {tuple(attn_logits.shape)} / {tuple(attn_lse.shape)} do not fit bs {bs}, "
                         f"{slots} chunks ({programs} programs)")
    group = num_q_heads // num_kv_heads
    block_b = max(16, next_power_of_2(bs))  # one compile for every batch of up to 16 rows
    _balanced_kernel[(programs,)](
        q3, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, attn_logits, attn_lse, sm_scale, bs,
        q3.stride(0), q3.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        req_to_token.stride(0), attn_logits.stride(0), attn_logits.stride(1), attn_logits.stride(2),
        attn_lse.stride(0), attn_lse.stride(1), group, head_dim, v_head_dim, num_kv_heads, BLOCK_B=block_b,
        BLOCK_H=max(16, next_power_of_2(group)), BLOCK_G=next_power_of_2(group),
        BLOCK_D=next_power_of_2(head_dim), BLOCK_DV=next_power_of_2(v_head_dim), BLOCK_N=BLOCK_N,
        SLOTS_AHEAD=SLOTS_AHEAD, num_warps=NUM_WARPS, num_stages=NUM_STAGES, **pdl_args(q))
    _balanced_merge_kernel[(bs, num_q_heads)](
        attn_logits, attn_lse, o3, seq_lens, bs, programs, attn_logits.stride(0), attn_logits.stride(1),
        attn_logits.stride(2), attn_lse.stride(0), attn_lse.stride(1), o3.stride(0), o3.stride(1), group,
        v_head_dim, num_kv_heads, BLOCK_B=block_b, BLOCK_S=next_power_of_2(slots),
        BLOCK_DV=next_power_of_2(v_head_dim), BLOCK_N=BLOCK_N, num_warps=4, **pdl_args(q))
