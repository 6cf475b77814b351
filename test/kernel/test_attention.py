"""decode_attention_fwd and extend_attention_fwd against the reference attention.

Contexts live at random slots of a page-size-1 pool, reached through req_to_token; GQA
ratios 1, 4 and 8; prefixes of length 0; contexts long enough to cross KV splits.
"""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import (compute_num_kv_splits, decode_attention_fwd, extend_attention_fwd, grid_kv_splits,
                            longest_first_order, prefix_order)
from radixlm_kernel.reference import decode_attention_ref, extend_attention_ref


def _pool(seq_lens: list[int], kv_heads: int, head_dim: int, device: str, dtype: torch.dtype
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """K/V buffers with random contents and a req_to_token whose rows (in reverse order) map to random slots."""
    total = sum(seq_lens)
    k_buf = torch.randn(total + 8, kv_heads, head_dim, device=device, dtype=dtype)
    v_buf = torch.randn(total + 8, kv_heads, head_dim, device=device, dtype=dtype)
    slots = torch.randperm(total + 7, device=device)[:total] + 1
    req_to_token = torch.zeros(len(seq_lens) + 2, max(seq_lens) + 5, dtype=torch.int32, device=device)
    rows = torch.arange(len(seq_lens), device=device).flip(0) + 1
    start = 0
    for row, n in zip(rows.tolist(), seq_lens):
        req_to_token[row, :n] = slots[start:start + n].int()
        start += n
    return k_buf, v_buf, req_to_token, rows


def _check_decode(seq_lens: list[int], kv_heads: int, group: int, splits: int, device: str, dtype: torch.dtype,
                  tol: dict, head_dim: int = 64) -> None:
    """decode_attention_fwd over a random pool with the current knobs against the reference."""
    k_buf, v_buf, req_to_token, rows = _pool(seq_lens, kv_heads, head_dim, device, dtype)
    bs, hq = len(seq_lens), kv_heads * group
    q = torch.randn(bs, hq * head_dim, device=device, dtype=dtype)
    lens = torch.tensor(seq_lens, device=device)
    o, ref = torch.empty_like(q), torch.empty(bs, hq, head_dim, device=device, dtype=dtype)
    decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, lens, splits, head_dim ** -0.5)
    decode_attention_ref(q.view(bs, hq, head_dim), k_buf, v_buf, ref, req_to_token, rows, lens, head_dim ** -0.5)
    torch.testing.assert_close(o, ref.view(bs, -1), **tol)


def _check_decode_twice(seq_lens: list[int], kv_heads: int, group: int, splits: int, device: str,
                        dtype: torch.dtype, tol: dict, head_dim: int = 64) -> None:
    """decode_attention_fwd launched twice on one split_counters buffer (each launch must leave it
    zero for the next) against the reference."""
    k_buf, v_buf, req_to_token, rows = _pool(seq_lens, kv_heads, head_dim, device, dtype)
    bs, hq = len(seq_lens), kv_heads * group
    q = torch.randn(bs, hq * head_dim, device=device, dtype=dtype)
    lens = torch.tensor(seq_lens, device=device)
    o, ref = torch.full_like(q, float("nan")), torch.empty(bs, hq, head_dim, device=device, dtype=dtype)
    counters = torch.zeros(bs, kv_heads, dtype=torch.int32, device=device)
    for _ in range(2):
        decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, lens, splits, head_dim ** -0.5,
                             split_counters=counters)
        assert counters.abs().sum().item() == 0
    decode_attention_ref(q.view(bs, hq, head_dim), k_buf, v_buf, ref, req_to_token, rows, lens, head_dim ** -0.5)
    torch.testing.assert_close(o, ref.view(bs, -1), **tol)


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("seq_lens,splits", [([1, 37, 130], 4), ([600, 5], None), ([300], 3), ([1, 37, 130], 1),
                                             ([600, 5], 1)])
def test_decode_attention(device: str, dtype: torch.dtype, tol: dict, group: int, seq_lens: list[int],
                          splits: int | None) -> None:
    torch.manual_seed(0)
    kv_heads, head_dim = 2, 64
    k_buf, v_buf, req_to_token, rows = _pool(seq_lens, kv_heads, head_dim, device, dtype)
    bs, hq = len(seq_lens), kv_heads * group
    q = torch.randn(bs, hq * head_dim, device=device, dtype=dtype)
    lens = torch.tensor(seq_lens, device=device)
    if splits is None:  # the device-side heuristic: 600 tokens cross a split boundary
        num_splits = compute_num_kv_splits(lens, kv_heads, max_kv_splits=8, num_sms=16)
        assert num_splits.tolist()[0] > 1
        max_splits = 8
    else:
        num_splits, max_splits = splits, None
    o = torch.empty_like(q)
    sm_scale = head_dim ** -0.5
    decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, lens, num_splits, sm_scale, max_kv_splits=max_splits)
    ref = torch.empty_like(q).view(bs, hq, head_dim)
    decode_attention_ref(q.view(bs, hq, head_dim), k_buf, v_buf, ref, req_to_token, rows, lens, sm_scale)
    torch.testing.assert_close(o, ref.view(bs, -1), **tol)


@pytest.mark.parametrize("group", [1, 4])
def test_decode_attention_kv_left(device: str, dtype: torch.dtype, tol: dict, group: int,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """SWAP_AB (the K/V tile as the left operand of both dots) gives the reference's output."""
    import radixlm_kernel.decode_attention as dec

    monkeypatch.setattr(dec, "SWAP_AB", True)
    monkeypatch.setattr(dec, "SMALL_BS", {False: 0, True: 0})  # the knobs above, not the small-batch ones
    torch.manual_seed(1)
    _check_decode([1, 37, 300], 2, group, 3, device, dtype, tol)


@pytest.mark.parametrize("kv_heads,heads_per_program", [(4, 4), (3, 2), (3, 4), (2, 1)])
@pytest.mark.parametrize("swap", [False, True], ids=["q-left", "kv-left"])
@pytest.mark.parametrize("splits,fused_merge", [(1, False), (3, False), (3, True)])
def test_decode_attention_head_groups(device: str, dtype: torch.dtype, tol: dict, kv_heads: int,
                                      heads_per_program: int, swap: bool, splits: int, fused_merge: bool,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Several kv heads per program (block-diagonal q), including a last group with fewer real heads
    than the program takes (3 kv heads in programs of 2, or in one of 4); splits merged by a second
    kernel or by each row's last split program (FUSED_MERGE; the 1-token row has one split with
    tokens, the others three): the reference's output."""
    import radixlm_kernel.decode_attention as dec

    monkeypatch.setattr(dec, "KV_HEADS", heads_per_program)
    monkeypatch.setattr(dec, "FUSED_MERGE", fused_merge)
    monkeypatch.setattr(dec, "SWAP_AB", swap)
    monkeypatch.setattr(dec, "SMALL_BS", {False: 0, True: 0})
    assert dec.kv_heads_per_program(kv_heads, dtype) == heads_per_program
    assert dec.kv_heads_per_program(1, dtype) == 1  # never more than the pool's heads, rounded up
    torch.manual_seed(4)
    _check_decode_twice([1, 37, 200], kv_heads, 4, splits, device, dtype, tol)


def test_fused_merge_many_splits(device: str, dtype: torch.dtype, tol: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused merge over up to 13 splits (a grid of 13, under a FUSED_MERGE_MAX_SPLITS of 16): rows
    with 1, 3, 7 and 13 splits holding tokens: the reference's output, twice."""
    import radixlm_kernel.decode_attention as dec

    monkeypatch.setattr(dec, "FUSED_MERGE_MAX_SPLITS", 16)
    torch.manual_seed(7)
    _check_decode_twice([1, 37, 90, 700], 2, 4, 13, device, dtype, tol)


@pytest.mark.parametrize("align", [True, False], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("fused_merge", [True, False])
def test_split_alignment(device: str, dtype: torch.dtype, tol: dict, align: bool, fused_merge: bool,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Split lengths rounded up to the tile (ALIGN_SPLITS) leave some of a row's splits without tokens
    (130 tokens in 8 splits: splits of 64, three hold tokens) and put a partial tile only at a row's end;
    merged by each row's last split program or by the second kernel: the reference's output, twice.
    Unaligned splits (cdiv(len, splits) tokens) alike."""
    import radixlm_kernel.decode_attention as dec

    monkeypatch.setattr(dec, "ALIGN_SPLITS", align)
    monkeypatch.setattr(dec, "FUSED_MERGE", fused_merge)
    torch.manual_seed(11)
    _check_decode_twice([1, 63, 65, 130, 700], 2, 4, 8, device, dtype, tol)


@pytest.mark.parametrize("grid,fused_merge", [(1, True), (8, True), (16, False), (16, True)])
def test_splits_from_lengths(device: str, dtype: torch.dtype, tol: dict, grid: int, fused_merge: bool,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """num_kv_splits=None: the kernels count each request's splits from its length, and the output is
    bitwise the one `compute_num_kv_splits` gives under the same grid (merged by the second kernel at
    16 splits unless the fused merge reaches 16)."""
    import radixlm_kernel.decode_attention as dec

    monkeypatch.setattr(dec, "FUSED_MERGE_MAX_SPLITS", 16 if fused_merge else 8)
    torch.manual_seed(8)
    kv_heads, group, head_dim, seq_lens = 2, 4, 64, [1, 64, 65, 300, 1100]
    k_buf, v_buf, req_to_token, rows = _pool(seq_lens, kv_heads, head_dim, device, dtype)
    bs, hq = len(seq_lens), kv_heads * group
    q = torch.randn(bs, hq * head_dim, device=device, dtype=dtype)
    lens = torch.tensor(seq_lens, device=device)
    splits = compute_num_kv_splits(lens, kv_heads, max_kv_splits=grid, num_sms=1000)
    assert splits.max().item() == grid
    outs = []
    for arg in (splits, None):
        o = torch.full_like(q, float("nan"))
        decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, lens, arg, head_dim ** -0.5,
                             max_kv_splits=grid)
        outs.append(o)
    assert torch.equal(outs[0], outs[1])
    ref = torch.empty(bs, hq, head_dim, device=device, dtype=dtype)
    decode_attention_ref(q.view(bs, hq, head_dim), k_buf, v_buf, ref, req_to_token, rows, lens, head_dim ** -0.5)
    torch.testing.assert_close(outs[1], ref.view(bs, -1), **tol)


@pytest.mark.parametrize("swap", [False, True], ids=["q-left", "kv-left"])
def test_decode_attention_slots_ahead(device: str, dtype: torch.dtype, tol: dict, swap: bool,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """SLOTS_AHEAD (each tile's slot ids loaded one iteration early, the last load past the end masked)."""
    import radixlm_kernel.decode_attention as dec

    monkeypatch.setattr(dec, "SLOTS_AHEAD", True)
    monkeypatch.setattr(dec, "SWAP_AB", swap)
    monkeypatch.setattr(dec, "SMALL_BS", {False: 0, True: 0})
    torch.manual_seed(5)
    _check_decode([1, 64, 65, 300], 2, 4, 2, device, dtype, tol)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16-pool", "fp8-pool"])
def test_small_batch_knobs(device: str, dtype: torch.dtype, tol: dict, fp8_tol: dict, fp8: bool,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of at most SMALL_BS[fp8] rows takes SMALL_KNOBS[fp8], a larger one the pool's knobs; both give
    the reference's output (here with 5 rows against SMALL_BS 4 and 5)."""
    import radixlm_kernel.decode_attention as dec

    assert dec._launch_knobs(fp8, dec.SMALL_BS[fp8]) == dec.SMALL_KNOBS[fp8]
    assert dec._launch_knobs(fp8, dec.SMALL_BS[fp8] + 1) != dec.SMALL_KNOBS[fp8]
    torch.manual_seed(6)
    kv_heads, head_dim, group, seq_lens = 2, 64, 4, [3, 70, 129, 1, 200]
    k_buf, v_buf, req_to_token, rows = _pool(seq_lens, kv_heads, head_dim, device, dtype)
    if fp8:
        k_buf, v_buf = k_buf.to(torch.float8_e4m3fn), v_buf.to(torch.float8_e4m3fn)
    bs, hq = len(seq_lens), kv_heads * group
    q = torch.randn(bs, hq * head_dim, device=device, dtype=dtype)
    lens = torch.tensor(seq_lens, device=device)
    ref = torch.empty(bs, hq, head_dim, device=device, dtype=dtype)
    decode_attention_ref(q.view(bs, hq, head_dim), k_buf, v_buf, ref, req_to_token, rows, lens, head_dim ** -0.5)
    for small in (4, 5):
        monkeypatch.setitem(dec.SMALL_BS, fp8, small)
        o = torch.empty_like(q)
        decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, lens, 2, head_dim ** -0.5)
        torch.testing.assert_close(o, ref.view(bs, -1), **(fp8_tol if fp8 else tol))


def test_num_kv_splits_bounds(device: str) -> None:
    from radixlm_kernel.decode_splits import occupancy_for

    lens = torch.tensor([1, 255, 257, 100000], device=device)
    cap = -(-occupancy_for(4) * 40 // 32)  # 4 rows x 8 kv heads = 32 programs per split, 40 SMs
    assert 5 < cap < 16
    splits = compute_num_kv_splits(lens, num_kv_heads=8, max_kv_splits=16, num_sms=40)
    assert splits.dtype == torch.int32 and splits.tolist() == [1, 4, 5, cap]  # occupancy caps the long row
    assert compute_num_kv_splits(lens, 8, 16, num_sms=1000).tolist() == [1, 4, 5, 16]
    out = torch.zeros(6, dtype=torch.int32, device=device)
    assert compute_num_kv_splits(lens, 8, 16, num_sms=40, out=out).data_ptr() == out.data_ptr()
    assert out.tolist() == [1, 4, 5, cap, 0, 0]


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_grid_splits_occupancy_bands(fp8: bool) -> None:
    """Each batch size fills the GPU with its band's occupancy (OCCUPANCY above every band; fp8 pools
    have their own bands); smaller batches aim for more programs per SM."""
    from radixlm_kernel import decode_splits as dec

    bands = dec.FP8_OCCUPANCY_BANDS if fp8 else dec.OCCUPANCY_BANDS
    assert list(bands) == sorted(bands) and all(occ >= dec.OCCUPANCY for _, occ in bands)
    edges = {1, 64, 65} | {max_bs for max_bs, _ in bands} | {max_bs + 1 for max_bs, _ in bands}
    for bs in sorted(edges):
        occupancy = next((occ for max_bs, occ in bands if bs <= max_bs), dec.OCCUPANCY)
        assert dec.occupancy_for(bs, fp8) == occupancy, bs
        want = max(1, min(32, -(-occupancy * 132 // (bs * 8))))
        assert grid_kv_splits(bs, 8, 32, 132, fp8=fp8) == want, bs
    assert grid_kv_splits(8, 8, 32, 132, fp8=fp8) == (7 if fp8 else 13)
    assert grid_kv_splits(17, 8, 32, 132, fp8=fp8) == (4 if fp8 else 6)  # the cascade-sized band up to 64 rows
    assert grid_kv_splits(65, 8, 32, 132, fp8=fp8) == 1


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("prefix_lens,extend_lens", [([0], [70]), ([0, 33, 130], [5, 80, 1]), ([200, 0], [3, 17]),
                                                      ([0, 40], [300, 129])])  # causal blocks below the diagonal
def test_extend_attention(device: str, dtype: torch.dtype, tol: dict, group: int, prefix_lens: list[int],
                          extend_lens: list[int]) -> None:
    torch.manual_seed(1)
    kv_heads, head_dim = (2 if group < 8 else 1), 64
    seq_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
    k_buf, v_buf, req_to_token, rows = _pool(seq_lens, kv_heads, head_dim, device, dtype)
    tokens, hq = sum(extend_lens), kv_heads * group
    q = torch.randn(tokens, hq, head_dim, device=device, dtype=dtype)
    k = torch.randn(tokens, kv_heads, head_dim, device=device, dtype=dtype)
    v = torch.randn(tokens, kv_heads, head_dim, device=device, dtype=dtype)
    ext = torch.tensor(extend_lens, device=device)
    start_loc = torch.cumsum(ext, 0) - ext
    lens = torch.tensor(seq_lens, device=device)
    o = torch.empty_like(q)
    sm_scale = head_dim ** -0.5
    extend_attention_fwd(q, k, v, o, k_buf, v_buf, req_to_token, rows, lens, ext, start_loc, max(extend_lens),
                         sm_scale)
    ref = torch.empty_like(q)
    extend_attention_ref(q, k, v, ref, k_buf, v_buf, req_to_token, rows, lens, ext, start_loc, sm_scale)
    torch.testing.assert_close(o, ref, **tol)


def test_extend_attention_flat_layout(device: str, dtype: torch.dtype, tol: dict) -> None:
    """q/k/v/o as `[T, H*D]`, the layout the attention backend passes."""
    torch.manual_seed(2)
    kv_heads, head_dim, hq = 1, 32, 4
    k_buf, v_buf, req_to_token, rows = _pool([20], kv_heads, head_dim, device, dtype)
    q = torch.randn(8, hq * head_dim, device=device, dtype=dtype)
    k = torch.randn(8, kv_heads * head_dim, device=device, dtype=dtype)
    v = torch.randn(8, kv_heads * head_dim, device=device, dtype=dtype)
    args = (req_to_token, rows, torch.tensor([20], device=device), torch.tensor([8], device=device),
            torch.tensor([0], device=device))
    o = torch.empty_like(q)
    extend_attention_fwd(q, k, v, o, k_buf, v_buf, *args, 8, 0.2)
    ref = torch.empty(8, hq, head_dim, device=device, dtype=dtype)
    extend_attention_ref(q.view(8, hq, -1), k.view(8, 1, -1), v.view(8, 1, -1), ref, k_buf, v_buf, *args, 0.2)
    torch.testing.assert_close(o, ref.view(8, -1), **tol)


@pytest.mark.parametrize("heads_fastest", [False, True], ids=["rows-fastest", "heads-fastest"])
@pytest.mark.parametrize("splits", [1, 3])
def test_decode_attention_launch_order(device: str, dtype: torch.dtype, tol: dict, splits: int,
                                       heads_fastest: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows sharing prefix slots, launched in `prefix_order` or longest first, with either grid order:
    the same result as the natural order."""
    import radixlm_kernel.decode_attention as dec

    monkeypatch.setattr(dec, "HEADS_FASTEST", heads_fastest)
    torch.manual_seed(3)
    kv_heads, head_dim, hq = 2, 64, 8
    seq_lens = [90, 70, 130, 64]
    k_buf, v_buf, req_to_token, rows = _pool(seq_lens, kv_heads, head_dim, device, dtype)
    req_to_token[rows[2], :50] = req_to_token[rows[0], :50]  # rows 0 and 2 share a 50-token prefix
    order = prefix_order(req_to_token, rows)
    assert sorted(order.tolist()) == [0, 1, 2, 3]
    assert abs(order.tolist().index(0) - order.tolist().index(2)) == 1  # the sharing rows are neighbours
    q = torch.randn(len(seq_lens), hq * head_dim, device=device, dtype=dtype)
    lens = torch.tensor(seq_lens, device=device)
    longest = longest_first_order(torch.tensor(seq_lens, device=device))
    assert longest.tolist() == [2, 0, 1, 3]
    outs = []
    for o_arg in (None, order, longest):
        o = torch.empty_like(q)
        decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, lens, splits, head_dim ** -0.5, order=o_arg)
        outs.append(o)
    torch.testing.assert_close(outs[1], outs[0], atol=0, rtol=0)
    torch.testing.assert_close(outs[2], outs[0], atol=0, rtol=0)


@pytest.mark.parametrize("via_f16,swap", [(True, False), (False, False), (True, True)],
                         ids=["via-f16", "via-q-dtype", "via-f16-kv-left"])
@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_pool(device: str, dtype: torch.dtype, tol: dict, fp8_tol: dict, fp8: torch.dtype, via_f16: bool,
                  swap: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """An fp8 KV pool (--kv-cache-dtype fp8_*): the kernels read it up to float16 (decode, the default)
    or q's dtype, with either operand order, so they match the reference on the same stored values."""
    import radixlm_kernel.decode_attention as dec

    monkeypatch.setattr(dec, "FP8_VIA_F16", via_f16)
    monkeypatch.setattr(dec, "FP8_SWAP_AB", swap)
    monkeypatch.setattr(dec, "SMALL_BS", {False: 0, True: 0})
    torch.manual_seed(3)
    kv_heads, head_dim, group = 2, 64, 4
    seq_lens = [300, 17]
    k_buf, v_buf, req_to_token, rows = _pool(seq_lens, kv_heads, head_dim, device, dtype)
    k_buf, v_buf = k_buf.to(fp8), v_buf.to(fp8)
    bs, hq = len(seq_lens), kv_heads * group
    lens = torch.tensor(seq_lens, device=device)
    q = torch.randn(bs, hq * head_dim, device=device, dtype=dtype)
    o, ref = torch.empty_like(q), torch.empty(bs, hq, head_dim, device=device, dtype=dtype)
    decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, lens, 4, head_dim ** -0.5)
    decode_attention_ref(q.view(bs, hq, head_dim), k_buf, v_buf, ref, req_to_token, rows, lens, head_dim ** -0.5)
    torch.testing.assert_close(o, ref.view(bs, -1), **(fp8_tol if via_f16 else tol))
    new = 5  # extend: the last 5 tokens of each request are new, the rest read from the fp8 pool
    qe = torch.randn(bs * new, hq, head_dim, device=device, dtype=dtype)
    ke = torch.randn(bs * new, kv_heads, head_dim, device=device, dtype=dtype)
    ve = torch.randn_like(ke)
    args = (req_to_token, rows, lens, torch.full((bs,), new, device=device), torch.arange(bs, device=device) * new)
    oe, refe = torch.empty_like(qe), torch.empty_like(qe)
    extend_attention_fwd(qe, ke, ve, oe, k_buf, v_buf, *args, new, head_dim ** -0.5)
    extend_attention_ref(qe, ke, ve, refe, k_buf, v_buf, *args, head_dim ** -0.5)
    torch.testing.assert_close(oe, refe, **tol)


def test_decode_rejects_buffers_that_do_not_fit(device: str) -> None:
    """Caller-passed scratch and split counters too small (or of the wrong dtype) for the launch: a ValueError
    naming them, before any kernel runs; the right sizes then work."""
    k_buf, v_buf, req_to_token, rows = _pool([300, 200], 2, 64, device, torch.float32)
    q = torch.randn(2, 4 * 64, device=device)
    lens = torch.tensor([300, 200], device=device)
    launch = dict(max_kv_splits=4)
    with pytest.raises(ValueError, match=r"scratch buffers \(2, 4, 2, 64\) / \(2, 4, 2\) do not fit bs 2"):
        decode_attention_fwd(q, k_buf, v_buf, torch.empty_like(q), req_to_token, rows, lens, 4, 0.125,
                             attn_logits=torch.empty(2, 4, 2, 64, device=device),
                             attn_lse=torch.empty(2, 4, 2, device=device), **launch)
    for counters in (torch.zeros(1, 2, dtype=torch.int32, device=device),
                     torch.zeros(2, 2, dtype=torch.int64, device=device)):
        with pytest.raises(ValueError, match="split_counters .* do not fit bs 2, 2 head groups"):
            decode_attention_fwd(q, k_buf, v_buf, torch.empty_like(q), req_to_token, rows, lens, 4, 0.125,
                                 split_counters=counters, **launch)
    o, ref = torch.empty_like(q), torch.empty(2, 4, 64, device=device)
    decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, lens, 4, 0.125,
                         split_counters=torch.zeros(2, 2, dtype=torch.int32, device=device), **launch)
    decode_attention_ref(q.view(2, 4, 64), k_buf, v_buf, ref, req_to_token, rows, lens, 0.125)
    torch.testing.assert_close(o, ref.view(2, -1), atol=2e-5, rtol=2e-5)
