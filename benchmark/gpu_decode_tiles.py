"""Decode attention's tile knobs (BLOCK_N, warps, pipeline stages) against its grid split count, at the
small batches with long contexts an online serving step has (CUDA only).

    python benchmark/gpu_decode_tiles.py --decode 4x2600r,6x2600r,8x2560r

Each case gets LAYERS distinct K/V pools, attended in turn inside one timed CUDA graph, so that the
K/V bytes come from HBM as in a model's step (one layer's pool of a small batch fits in the 50 MB L2).
Knobs apply at every batch size here (the small-batch knobs are switched off). Prints, per case, the
kernel as the server launches it, the best (knobs, S), and each knob set's best S; every timed config
is checked against the torch reference on the last pool.
"""

from __future__ import annotations

import argparse
import itertools

import torch

import radixlm_kernel as K
from radixlm_kernel import decode_attention as dec
from radixlm_kernel import reference as R

from gpu_sweep_cases import DEV, DT, HKV, HQ, D, bench, case_lens, decode_cases, pool

KNOBS = ("BLOCK_N", "NUM_WARPS", "NUM_STAGES")
# the twentieth session's first call swept (32, 64) x (2, 4, 8) x (1, 2, 3, 4) and (128,) x (4, 8) x (1, 2, 3): these
# are its leaders and the served knobs (use --all for that grid)
TILES = [(64, 2, 3), (64, 4, 3), (64, 2, 2), (64, 4, 2), (128, 4, 1), (128, 4, 2), (128, 4, 3), (128, 8, 2)]
ALL_TILES = [(bn, w, st) for bn, w, st in itertools.product((32, 64), (2, 4, 8), (1, 2, 3, 4))] + \
            [(128, w, st) for w, st in itertools.product((4, 8), (1, 2, 3))]


def layer_pools(lens_list: list[int], layers: int
                ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor, torch.Tensor]:
    """`layers` K/V buffer pairs over one slot layout (as a model's layers are), req_to_token and its rows."""
    torch.manual_seed(0)
    first = pool(lens_list)
    out = [(first[0], first[1])]
    for _ in range(layers - 1):
        out.append((torch.randn_like(first[0]), torch.randn_like(first[1])))
    return out, first[2], first[3]


def run_case(bs: int, ctx: str, layers: int, splits: list[int], sms: int) -> None:
    lens_list = case_lens(ctx, bs)
    kvs, r2t, rows = layer_pools(lens_list, layers)
    lens = torch.tensor(lens_list, device=DEV)
    q = torch.randn(bs, HQ, D, device=DEV, dtype=DT)
    o = torch.empty_like(q)
    ref = torch.empty_like(q)
    R.decode_attention_ref(q, kvs[-1][0], kvs[-1][1], ref, r2t, rows, lens, D ** -0.5)
    logits = torch.empty(bs, HQ, 32, D, device=DEV, dtype=torch.float32)
    lse = torch.empty(bs, HQ, 32, device=DEV, dtype=torch.float32)
    counters = torch.zeros(bs, HKV, dtype=torch.int32, device=DEV)
    nbytes = 2 * sum(lens_list) * HKV * D * 2

    def timed(grid: int) -> float:
        def fn() -> None:
            for kb, vb in kvs:
                K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, None, D ** -0.5, grid, logits, lse,
                                       split_counters=counters)
        ms = bench(fn) / layers
        err = (o.float() - ref.float()).abs().max().item()
        if err > 8e-2:
            raise AssertionError(f"mismatch {err:.3f}")
        return ms

    saved = tuple(getattr(dec, k) for k in KNOBS)
    small = dict(dec.SMALL_BS)
    served_grid = K.grid_kv_splits(bs, HKV, 32, sms)
    served = timed(served_grid)
    results: dict[tuple, float] = {}
    dec.SMALL_BS[False] = 0  # the knobs below at every batch size
    for tile in TILES:
        for name, value in zip(KNOBS, tile):
            setattr(dec, name, value)
        for s in sorted(set(splits) | {served_grid}):
            try:
                results[(*tile, s)] = timed(s)
            except Exception as e:  # noqa: BLE001 - shared memory or a mismatch: named in the log
                print(f"  skip {tile} S={s}: {type(e).__name__}: {str(e)[:80]}", flush=True)
                break
    for name, value in zip(KNOBS, saved):
        setattr(dec, name, value)
    dec.SMALL_BS.update(small)
    best = min(results, key=results.get)
    us = lambda ms: f"{ms * 1e3:.1f} ({nbytes / ms / 1e9:.2f})"  # noqa: E731
    print(f"| {bs} x {ctx} | {us(served)} (S={served_grid}) | **{us(results[best])}** {best} |", flush=True)
    per_tile = []
    for tile in TILES:
        mine = {k: v for k, v in results.items() if k[:3] == tile}
        if mine:
            k = min(mine, key=mine.get)
            at_served = mine.get((*tile, served_grid))
            per_tile.append(f"{tile}: {mine[k] * 1e3:.1f}@{k[3]}"
                            + (f" ({at_served * 1e3:.1f}@{served_grid})" if at_served and k[3] != served_grid else ""))
    print("  per tile (BLOCK_N, warps, stages): best us @ S (at the served S): " + "; ".join(per_tile), flush=True)
    del kvs
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decode", default="1x1024,1x4096,2x2600r,3x2600r,4x2600r,5x2600r,6x2600r,8x2560r,"
                                              "12x2048r,16x2048r,6x512,8x384")
    parser.add_argument("--splits", default="8,12,16,24,32", help="grid split counts tried with every tile")
    parser.add_argument("--layers", type=int, default=4, help="distinct K/V pools per timed call")
    parser.add_argument("--all", action="store_true", help="the full tile grid (ALL_TILES)")
    args = parser.parse_args()
    if args.all:
        TILES[:] = ALL_TILES
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {sms} SMs; served knobs "
          f"{tuple(getattr(dec, k) for k in KNOBS)}, up to {dec.SMALL_BS[False]} rows {dec.SMALL_KNOBS[False]}")
    print("\n## decode attention, bf16 K/V: tile knobs x grid splits (us per layer call, TB/s of K+V read)")
    print("| bs x ctx | as served (grid S) | best (BLOCK_N, warps, stages, S) |")
    print("|---|---|---|")
    for bs, ctx in decode_cases(args.decode):
        run_case(bs, ctx, args.layers, [int(s) for s in args.splits.split(",")], sms)


if __name__ == "__main__":
    main()
