"""Decode attention as served against the evenly cut grid of `radixlm_kernel.decode_balanced` (CUDA only).

    python benchmark/gpu_decode_balanced.py --decode 6x2600r,8x2560r,16x2048r

Each case gets LAYERS distinct K/V pools attended in turn inside one timed CUDA graph (K/V from HBM,
as in a model's step; see gpu_decode_tiles.py). The served kernel runs with the server's knobs and grid
splits; the balanced one with each (BLOCK_N, warps, stages, slots ahead, programs per SM) of CONFIGS.
Every timed config is checked against the torch reference on the last pool. Prints us per layer call
and TB/s of K+V read.
"""

from __future__ import annotations

import argparse

import torch

import radixlm_kernel as K
from radixlm_kernel import decode_balanced as bal

from gpu_decode_tiles import layer_pools
from gpu_sweep_cases import DEV, DT, HKV, HQ, D, bench, case_lens, decode_cases
from radixlm_kernel import reference as R

KNOBS = ("BLOCK_N", "NUM_WARPS", "NUM_STAGES", "SLOTS_AHEAD", "PROGRAMS_PER_SM")
CONFIGS = [(128, 4, 2, False, 1), (128, 4, 2, True, 1), (128, 4, 2, False, 2), (128, 4, 3, False, 1),
           (128, 8, 2, False, 1), (64, 4, 3, False, 1), (64, 4, 3, False, 2), (64, 4, 2, False, 2),
           (64, 2, 3, False, 2), (64, 4, 4, False, 1), (64, 2, 2, False, 4), (128, 4, 1, False, 2)]


def run_case(bs: int, ctx: str, layers: int, sms: int) -> None:
    lens_list = case_lens(ctx, bs)
    kvs, r2t, rows = layer_pools(lens_list, layers)
    lens = torch.tensor(lens_list, device=DEV)
    q = torch.randn(bs, HQ, D, device=DEV, dtype=DT)
    o = torch.empty_like(q)
    ref = torch.empty_like(q)
    R.decode_attention_ref(q, kvs[-1][0], kvs[-1][1], ref, r2t, rows, lens, D ** -0.5)
    slots = bal.max_chunks(4 * sms, HKV)
    logits = torch.empty(bs, HQ, max(32, slots), D, device=DEV, dtype=torch.float32)
    lse = torch.empty(bs, HQ, max(32, slots), device=DEV, dtype=torch.float32)
    counters = torch.zeros(bs, HKV, dtype=torch.int32, device=DEV)
    nbytes = 2 * sum(lens_list) * HKV * D * 2
    grid = K.grid_kv_splits(bs, HKV, 32, sms)

    def check() -> None:
        err = (o.float() - ref.float()).abs().max().item()
        if err > 8e-2:
            raise AssertionError(f"mismatch {err:.3f}")

    def served() -> None:
        for kb, vb in kvs:
            K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, None, D ** -0.5, grid, logits, lse,
                                   split_counters=counters)

    def balanced() -> None:
        for kb, vb in kvs:
            bal.decode_attention_balanced_fwd(q, kb, vb, o, r2t, rows, lens, D ** -0.5, None, logits, lse)

    served_ms = bench(served) / layers
    check()
    saved = tuple(getattr(bal, k) for k in KNOBS)
    results: dict[tuple, float] = {}
    for cfg in CONFIGS:
        for name, value in zip(KNOBS, cfg):
            setattr(bal, name, value)
        try:
            results[cfg] = bench(balanced) / layers
            check()
        except Exception as e:  # noqa: BLE001 - shared memory or a mismatch: named in the log
            print(f"  skip {cfg}: {type(e).__name__}: {str(e)[:80]}", flush=True)
            results.pop(cfg, None)
    for name, value in zip(KNOBS, saved):
        setattr(bal, name, value)
    us = lambda ms: f"{ms * 1e3:.1f} ({nbytes / ms / 1e9:.2f})"  # noqa: E731
    best = min(results, key=results.get) if results else None
    first = results.get(CONFIGS[0])
    print(f"| {bs} x {ctx} | {us(served_ms)} (S={grid}) | {us(first) if first else '-'} | "
          f"**{us(results[best]) if best else '-'}** {best} |", flush=True)
    print("  balanced per config (BLOCK_N, warps, stages, slots ahead, programs/SM): " +
          "; ".join(f"{cfg}: {ms * 1e3:.1f}" for cfg, ms in results.items()), flush=True)
    del kvs
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decode", default="1x1024,1x4096,2x2600r,4x2600r,6x2600r,8x2560r,12x2048r,16x2048r,"
                                              "6x512,32x2048r,64x2048r")
    parser.add_argument("--layers", type=int, default=4, help="distinct K/V pools per timed call")
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {sms} SMs")
    print("\n## decode attention, bf16 K/V: served against balanced (us per layer call, TB/s of K+V read)")
    print(f"| bs x ctx | served (grid S) | balanced {CONFIGS[0]} | balanced best |")
    print("|---|---|---|---|")
    for bs, ctx in decode_cases(args.decode):
        run_case(bs, ctx, args.layers, sms)


if __name__ == "__main__":
    main()
