"""Cascade decode over a shared prefix equals the padded single-SDPA decode."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixlm.layers.attention.shared_prefix_decode import shared_prefix_decode, shared_prefix_len


def _padded_reference(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor,
                      seq_lens: torch.Tensor, num_q_heads: int, scale: float) -> torch.Tensor:
    bs, length = slots.shape
    kb = k_buf[slots].permute(0, 2, 1, 3)
    vb = v_buf[slots].permute(0, 2, 1, 3)
    valid = torch.arange(length).unsqueeze(0) < seq_lens.unsqueeze(1)
    out = F.scaled_dot_product_attention(q.view(bs, num_q_heads, 1, -1), kb, vb, attn_mask=valid[:, None, None, :],
                                         scale=scale, enable_gqa=True)
    return out.reshape(bs, -1)


def test_matches_padded_decode_and_finds_the_shared_columns() -> None:
    torch.manual_seed(0)
    bs, hq, hkv, dim, prefix = 5, 6, 2, 16, 70
    k_buf, v_buf = torch.randn(1000, hkv, dim), torch.randn(1000, hkv, dim)
    seq_lens = torch.tensor([prefix + n for n in (1, 9, 4, 30, 2)])
    rows = [torch.cat([torch.arange(1, prefix + 1), torch.arange(200 + 40 * i, 200 + 40 * i + 30)]) for i in range(bs)]
    slots = torch.stack(rows)[:, :int(seq_lens.max())]
    assert shared_prefix_len(slots, seq_lens) == prefix
    assert shared_prefix_len(slots[:1], seq_lens[:1]) == 0  # one request: nothing to share
    q = torch.randn(bs, hq * dim)
    got = shared_prefix_decode(q, k_buf, v_buf, slots, seq_lens, prefix, hq, dim ** -0.5)
    want = _padded_reference(q, k_buf, v_buf, slots, seq_lens, hq, dim ** -0.5)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_shared_prefix_stops_below_the_shortest_sequence() -> None:
    slots = torch.arange(1, 11).repeat(3, 1)  # identical rows (cannot happen for real decode rows)
    assert shared_prefix_len(slots, torch.tensor([10, 6, 10])) == 5
