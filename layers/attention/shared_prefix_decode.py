"""Decode attention for a batch whose requests all start with the same KV slots (cascade).

When every request in a decode batch shares its first `p` slots (the radix cache hands
them the same prefix, e.g. one system prompt), gathering that prefix once per request
dominates the CPU decode step. Here the prefix is gathered once and every query attends
to it in one matmul; the per-request suffixes are gathered and attended separately, and
the two partial results merge exactly through their log-sum-exps.
"""

from __future__ import annotations

from typing import Optional

import torch

MIN_SHARED_PREFIX = 64  # below this the plain padded gather is as cheap


def shared_prefix_len(slots: torch.Tensor, seq_lens: torch.Tensor) -> int:
    """Columns where every row of `slots` [bs, L] equals row 0 (capped below the shortest sequence)."""
    if slots.shape[0] < 2:
        return 0
    same = (slots == slots[:1]).all(dim=0)
    p = int(same.int().cumprod(0).sum())
    return min(p, int(seq_lens.min()) - 1)


def _partial(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
             mask: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention returning (output, log-sum-exp); q [..., g, D], k/v [..., L, D]."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.matmul(torch.exp(scores - lse), v), lse


def shared_prefix_decode(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor,
                         seq_lens: torch.Tensor, prefix_len: int, num_q_heads: int, scale: float) -> torch.Tensor:
    """q [bs, Hq*D]; slots [bs, max_len] (padded); returns [bs, Hq*Dv]."""
    bs = q.shape[0]
    hkv, dim = k_buf.shape[1], k_buf.shape[2]
    group = num_q_heads // hkv
    qg = q.view(bs, hkv, group, dim).to(k_buf.dtype)
    # prefix: one gather, all queries at once -> [Hkv, bs*group, D]
    kp = k_buf.index_select(0, slots[0, :prefix_len]).transpose(0, 1)  # [Hkv, p, D]
    vp = v_buf.index_select(0, slots[0, :prefix_len]).transpose(0, 1)
    q_all = qg.permute(1, 0, 2, 3).reshape(hkv, bs * group, dim)
    out_p, lse_p = _partial(q_all, kp, vp, scale, None)
    out_p = out_p.view(hkv, bs, group, -1).permute(1, 0, 2, 3)
    lse_p = lse_p.view(hkv, bs, group, 1).permute(1, 0, 2, 3)
    # suffixes: per request, padded to the longest
    suffix = slots[:, prefix_len:]
    length = suffix.shape[1]
    ks = k_buf.index_select(0, suffix.reshape(-1)).view(bs, length, hkv, dim).transpose(1, 2)
    vs = v_buf.index_select(0, suffix.reshape(-1)).view(bs, length, hkv, -1).transpose(1, 2)
    valid = torch.arange(length, device=q.device).unsqueeze(0) < (seq_lens - prefix_len).unsqueeze(1)
    out_s, lse_s = _partial(qg, ks, vs, scale, valid[:, None, None, :])
    top = torch.maximum(lse_p, lse_s)
    w_p, w_s = torch.exp(lse_p - top), torch.exp(lse_s - top)
    out = (out_p * w_p + out_s * w_s) / (w_p + w_s)
    return out.reshape(bs, -1).to(q.dtype)
