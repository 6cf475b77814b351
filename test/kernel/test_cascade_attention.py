"""Cascade decode attention (shared prefixes read once per block) against the reference attention.

The batch mixes what a radix cache produces: a group of 19 requests sharing a prefix (two
blocks of 16 + 3), a group whose members share more with each other than with the third
(nested sharing: the group's prefix is the shortest), a pair sharing exactly `min_shared`
tokens, a pair sharing fewer (no cascade), unrelated requests, requests shorter than
`min_shared`, and padded graph rows (row 0, length 1). Rows are shuffled; the plan and the
attention output are checked, with one split per request (merge inside the decode kernel) and
with several (the merge kernel).
"""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import cascade_plan, compute_num_kv_splits, decode_attention_fwd, members_per_block
from radixlm_kernel import cascade_attention
from radixlm_kernel.cascade_attention import PREFIX_SPLITS
from radixlm_kernel.reference import decode_attention_ref

MIN_SHARED = 16
KV_HEADS, HEAD_DIM = 2, 32


class Pool:
    """Slots handed out like the radix cache does: a shared prefix is the same slots in every row."""

    def __init__(self, device: str, width: int = 160) -> None:
        self.free = (torch.randperm(4000) + 1).tolist()
        self.rows: list[list[int]] = [[0]]  # row 0: the padding row, slot 0
        self.width, self.device = width, device

    def take(self, n: int) -> list[int]:
        out, self.free = self.free[:n], self.free[n:]
        return out

    def add(self, prefix: list[int], own: int) -> int:
        self.rows.append(prefix + self.take(own))
        return len(self.rows) - 1

    def tables(self) -> torch.Tensor:
        table = torch.full((len(self.rows) + 1, self.width), 7, dtype=torch.int32)  # stale slots past the ends
        for i, slots in enumerate(self.rows):
            table[i, :len(slots)] = torch.tensor(slots, dtype=torch.int32)
        return table.to(self.device)


def _batch(device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[int, int]]:
    """(req_to_token, rows, seq_lens, expected shared prefix per row)."""
    pool, want = Pool(device), {}
    a = pool.take(40)
    for i in range(19):
        want[pool.add(a, 1 + i % 7)] = 40
    b, b2 = pool.take(70), pool.take(20)
    want[pool.add(b + b2, 5)] = 70
    want[pool.add(b + b2, 9)] = 70
    want[pool.add(b, 33)] = 70
    c = pool.take(MIN_SHARED)
    want[pool.add(c, 3)] = MIN_SHARED
    want[pool.add(c, 1)] = MIN_SHARED
    d = pool.take(MIN_SHARED - 6)
    want[pool.add(d, 20)] = 0
    want[pool.add(d, 25)] = 0
    for n in (50, 61, 5, 3):
        want[pool.add([], n)] = 0
    rows = list(want) + [0, 0]  # two padded graph rows
    want[0] = 0
    perm = torch.randperm(len(rows)).tolist()
    rows = [rows[i] for i in perm]
    lens = [len(pool.rows[r]) for r in rows]
    as_t = lambda xs: torch.tensor(xs, dtype=torch.int64, device=device)  # noqa: E731
    return pool.tables(), as_t(rows), as_t(lens), want


def test_plan_groups_shared_prefixes(device: str) -> None:
    torch.manual_seed(0)
    r2t, rows, lens, want = _batch(device)
    plan = cascade_plan(r2t, rows, lens, members=16, min_shared=MIN_SHARED)
    assert plan.pre_len.tolist() == [want[r] for r in rows.tolist()]
    assert plan.num_blocks.item() == 4  # group a: 16 + 3, group b, pair c
    n_pre = plan.n_pre.tolist()
    assert all((p > 0) == (n > 0) for p, n in zip(plan.pre_len.tolist(), n_pre))
    nb = plan.num_blocks.item()
    counts = sorted(plan.blk_count[:nb].tolist())
    assert counts == [2, 3, 3, 16]
    for j in range(nb):  # every member of a block is in the batch and shares the block's prefix slots
        start, count, prefix = (int(plan.blk_start[j]), int(plan.blk_count[j]), int(plan.blk_prefix[j]))
        lead = r2t[plan.blk_row[j], :prefix]
        for pos in range(start, start + count):
            b = int(plan.order[pos])
            assert torch.equal(r2t[rows[b], :prefix], lead) and plan.pre_len[b] == prefix


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("max_splits,prefix_split_len,from_len", [(1, 512, False), (4, 512, False), (1, 16, False),
                                                                  (4, 24, False), (4, 24, True)])
def test_cascade_matches_reference(device: str, dtype: torch.dtype, tol: dict, group: int, max_splits: int,
                                   prefix_split_len: int, from_len: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefix split lengths of 16 and 24 give the shared prefixes (16, 40, 70 tokens) 1 to 3 splits;
    `from_len`: the kernels count each request's own splits themselves (num_kv_splits=None)."""
    monkeypatch.setattr(cascade_attention, "PREFIX_SPLIT_LEN", prefix_split_len)
    torch.manual_seed(1)
    r2t, rows, lens, _ = _batch(device)
    bs, hq = rows.shape[0], KV_HEADS * group
    k_buf = torch.randn(4100, KV_HEADS, HEAD_DIM, device=device, dtype=dtype)
    v_buf = torch.randn(4100, KV_HEADS, HEAD_DIM, device=device, dtype=dtype)
    q = torch.randn(bs, hq * HEAD_DIM, device=device, dtype=dtype)
    plan = cascade_plan(r2t, rows, lens, members=members_per_block(group), min_shared=MIN_SHARED)
    assert plan.n_pre.max().item() == min(PREFIX_SPLITS, -(-70 // prefix_split_len))
    own = lens - plan.pre_len.long()
    splits = None if from_len else compute_num_kv_splits(own, KV_HEADS, max_splits, num_sms=64)
    o = torch.full_like(q, float("nan"))
    decode_attention_fwd(q, k_buf, v_buf, o, r2t, rows, lens, splits, HEAD_DIM ** -0.5, max_kv_splits=max_splits,
                         cascade=plan, num_sms=4)
    ref = torch.empty(bs, hq, HEAD_DIM, device=device, dtype=dtype)
    decode_attention_ref(q.view(bs, hq, HEAD_DIM), k_buf, v_buf, ref, r2t, rows, lens, HEAD_DIM ** -0.5)
    torch.testing.assert_close(o, ref.view(bs, -1), **tol)


@pytest.mark.parametrize("heads_per_program", [1, 2])
@pytest.mark.parametrize("max_splits,fused_merge", [(1, False), (4, False), (4, True)])
def test_cascade_reads_fp8_pool(device: str, dtype: torch.dtype, fp8_tol: dict, heads_per_program: int,
                                max_splits: int, fused_merge: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """An fp8 pool, with one or two kv heads per decode program (the own-context kernel folds or
    merges the prefix partials on the block-diagonal layout, in the merge kernel or, FUSED_MERGE, in
    each row's last split program)."""
    from radixlm_kernel import decode_attention

    monkeypatch.setattr(decode_attention, "FP8_KV_HEADS", heads_per_program)
    monkeypatch.setattr(decode_attention, "FUSED_MERGE", fused_merge)
    torch.manual_seed(4)
    r2t, rows, lens, _ = _batch(device)
    bs, hq = rows.shape[0], KV_HEADS * 4
    k_buf = torch.randn(4100, KV_HEADS, HEAD_DIM, device=device).to(torch.float8_e4m3fn)
    v_buf = torch.randn(4100, KV_HEADS, HEAD_DIM, device=device).to(torch.float8_e4m3fn)
    q = torch.randn(bs, hq * HEAD_DIM, device=device, dtype=dtype)
    plan = cascade_plan(r2t, rows, lens, members=16, min_shared=MIN_SHARED)
    o = torch.empty_like(q)
    splits = compute_num_kv_splits(lens - plan.pre_len.long(), KV_HEADS, max_splits, num_sms=64)
    decode_attention_fwd(q, k_buf, v_buf, o, r2t, rows, lens, splits, HEAD_DIM ** -0.5, max_kv_splits=max_splits,
                         cascade=plan, num_sms=4)
    ref = torch.empty(bs, hq, HEAD_DIM, device=device, dtype=dtype)
    decode_attention_ref(q.view(bs, hq, HEAD_DIM), k_buf, v_buf, ref, r2t, rows, lens, HEAD_DIM ** -0.5)
    torch.testing.assert_close(o, ref.view(bs, -1), **fp8_tol)


def test_scratch_must_hold_prefix_splits(device: str) -> None:
    r2t, rows, lens, _ = _batch(device)
    plan = cascade_plan(r2t, rows, lens, members=16, min_shared=MIN_SHARED)
    bs = rows.shape[0]
    q = torch.randn(bs, 4 * KV_HEADS * HEAD_DIM, device=device)
    kv = torch.randn(4100, KV_HEADS, HEAD_DIM, device=device)
    small = torch.empty(bs, 4 * KV_HEADS, PREFIX_SPLITS, HEAD_DIM, device=device)
    with pytest.raises(ValueError, match="do not fit"):
        decode_attention_fwd(q, kv, kv, torch.empty_like(q), r2t, rows, lens, 1, 1.0, attn_logits=small,
                             attn_lse=small[..., 0], cascade=plan)


def test_plan_rejects_probe_outside_table(device: str) -> None:
    r2t, rows, lens, _ = _batch(device)
    with pytest.raises(ValueError, match="min_shared"):
        cascade_plan(r2t, rows, lens, members=16, min_shared=r2t.shape[1] + 1)
