"""decode_attention_fwd with the rotary embedding and the KV store folded in (`DecodeRope`)
against the separate kernels' references: rotate q/k, store k/v at the new slots, attend.

The new token is each context's last position; contexts cross KV splits (so only one split
program stores), q and k/v are column slices of one qkv tensor as the model passes them.
"""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import DecodeRope, decode_attention_fwd
from radixlm_kernel.reference import apply_rotary_pos_emb_and_store_kv_ref_, decode_attention_ref


def _cos_sin(max_pos: int, rotary_dim: int, device: str) -> torch.Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(device)


def _pool(seq_lens: list[int], kv_heads: int, head_dim: int, device: str, dtype: torch.dtype):
    total = sum(seq_lens)
    k_buf = torch.randn(total + 8, kv_heads, head_dim, device=device, dtype=dtype)
    v_buf = torch.randn(total + 8, kv_heads, head_dim, device=device, dtype=dtype)
    slots = torch.randperm(total + 7, device=device)[:total] + 1
    req_to_token = torch.zeros(len(seq_lens) + 1, max(seq_lens) + 3, dtype=torch.int32, device=device)
    rows = torch.arange(len(seq_lens), device=device) + 1
    start = 0
    for row, n in zip(rows.tolist(), seq_lens):
        req_to_token[row, :n] = slots[start:start + n].int()
        start += n
    last = torch.tensor([req_to_token[r, n - 1].item() for r, n in zip(rows.tolist(), seq_lens)], device=device)
    return k_buf, v_buf, req_to_token, rows, last.long()


@pytest.mark.parametrize("is_neox,rotary_frac", [(True, 1.0), (False, 1.0), (True, 0.5)])
@pytest.mark.parametrize("seq_lens,splits", [([1, 37, 130], 4), ([300], 1), ([5, 200], 3)])
def test_decode_rope_matches_separate_kernels(device: str, dtype: torch.dtype, tol: dict, is_neox: bool,
                                              rotary_frac: float, seq_lens: list[int], splits: int) -> None:
    torch.manual_seed(0)
    kv_heads, group, head_dim = 2, 4, 64
    hq = kv_heads * group
    k_buf, v_buf, req_to_token, rows, loc = _pool(seq_lens, kv_heads, head_dim, device, dtype)
    bs = len(seq_lens)
    qkv = torch.randn(bs, (hq + 2 * kv_heads) * head_dim, device=device, dtype=dtype)
    q, k, v = qkv.split([hq * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    cache = _cos_sin(512, int(head_dim * rotary_frac), device)
    lens = torch.tensor(seq_lens, device=device)
    positions = lens - 1
    sm_scale = head_dim ** -0.5

    ref_k_buf, ref_v_buf, ref_q, ref_k = k_buf.clone(), v_buf.clone(), q.clone(), k.clone()
    apply_rotary_pos_emb_and_store_kv_ref_(positions, ref_q, ref_k, v, head_dim, cache, is_neox, ref_k_buf,
                                           ref_v_buf, loc)
    ref = torch.empty(bs, hq, head_dim, device=device, dtype=dtype)
    decode_attention_ref(ref_q.view(bs, hq, head_dim), ref_k_buf, ref_v_buf, ref, req_to_token, rows, lens, sm_scale)

    q_before = q.clone()
    o = torch.empty(bs, hq * head_dim, device=device, dtype=dtype)
    decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, lens, splits, sm_scale,
                         rope=DecodeRope(k=k, v=v, loc=loc, cos_sin_cache=cache, is_neox=is_neox))
    torch.testing.assert_close(k_buf, ref_k_buf, atol=0, rtol=0)  # the same rounding as the separate kernel
    torch.testing.assert_close(v_buf, ref_v_buf, atol=0, rtol=0)
    torch.testing.assert_close(o, ref.view(bs, -1), **tol)
    assert torch.equal(q, q_before)  # q is read, never rotated in place


def test_decode_rope_rejects_bad_shapes(device: str, dtype: torch.dtype) -> None:
    k_buf, v_buf, req_to_token, rows, loc = _pool([4, 6], 2, 64, device, dtype)
    q = torch.randn(2, 8 * 64, device=device, dtype=dtype)
    o = torch.empty_like(q)
    cache = _cos_sin(64, 64, device)
    lens = torch.tensor([4, 6], device=device)
    bad_k = torch.randn(2, 64, device=device, dtype=dtype)  # one kv head's width, the pool has two
    with pytest.raises(ValueError, match="rope.k"):
        decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, lens, 1, 0.125,
                             rope=DecodeRope(k=bad_k, v=bad_k, loc=loc, cos_sin_cache=cache, is_neox=True))
