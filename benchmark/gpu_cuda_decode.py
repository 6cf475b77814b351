"""The CUDA-core decode attention (`radixlm_kernel.cuda_decode`) against the served Triton kernel at the small
batches with long contexts of an online serving step (CUDA only).

    python benchmark/gpu_cuda_decode.py --decode 4x2600r,6x2600r,8x2560r

As `gpu_decode_tiles.py`: each case gets LAYERS distinct K/V pools attended in turn inside one timed CUDA graph
(K/V come from HBM, as in a model's step), lengths `Nx2600r` uniform in [1, 5199]. Prints, per case, the Triton
kernel as the server launches it (grid splits S from `grid_kv_splits`), the CUDA kernel at the served S with
its default config, and the CUDA kernel's best (config, S); us per layer call and TB/s of K+V read. Every
timed launch is checked against the torch reference on the last pool.
"""

from __future__ import annotations

import argparse
import time

import torch

import radixlm_kernel as K
from radixlm_kernel import cuda_decode
from radixlm_kernel import reference as R

from gpu_decode_tiles import layer_pools
from gpu_sweep_cases import DEV, DT, HKV, HQ, D, bench, case_lens, decode_cases

MAX_SPLITS = 32


def run_case(bs: int, ctx: str, layers: int, splits: list[int], sms: int) -> None:
    lens_list = case_lens(ctx, bs)
    kvs, r2t, rows = layer_pools(lens_list, layers)
    lens = torch.tensor(lens_list, device=DEV)
    q = torch.randn(bs, HQ, D, device=DEV, dtype=DT)
    o = torch.empty_like(q)
    ref = torch.empty_like(q)
    R.decode_attention_ref(q, kvs[-1][0], kvs[-1][1], ref, r2t, rows, lens, D ** -0.5)
    logits = torch.empty(bs, HQ, MAX_SPLITS, D, device=DEV, dtype=torch.float32)
    lse = torch.empty(bs, HQ, MAX_SPLITS, device=DEV, dtype=torch.float32)
    counters = torch.zeros(bs, HKV, dtype=torch.int32, device=DEV)
    nbytes = 2 * sum(lens_list) * HKV * D * 2

    def timed(launch) -> float:
        def fn() -> None:
            for kb, vb in kvs:
                launch(kb, vb)
        o.fill_(float("nan"))
        ms = bench(fn) / layers
        err = (o.float() - ref.float()).abs().max().item()
        if not err < 5e-2:
            raise AssertionError(f"mismatch {err:.3f}")
        return ms

    def triton(grid: int):
        return lambda kb, vb: K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, None, D ** -0.5, grid, logits,
                                                     lse, split_counters=counters)

    def cuda(grid: int, config: int):
        return lambda kb, vb: cuda_decode.decode_attention_cuda(q, kb, vb, o, r2t, rows, lens, D ** -0.5, grid,
                                                                logits, lse, counters, config=config)

    served_grid = K.grid_kv_splits(bs, HKV, MAX_SPLITS, sms)
    served = timed(triton(served_grid))
    results: dict[tuple[int, int], float] = {}
    for config in cuda_decode.CONFIGS:
        for s in sorted(set(splits) | {served_grid}):
            try:
                results[(config, s)] = timed(cuda(s, config))
            except Exception as e:  # noqa: BLE001 - a launch error or a mismatch: named in the log
                print(f"  config {config} S={s}: {type(e).__name__}: {str(e)[:100]}", flush=True)
    us = lambda ms: f"{ms * 1e3:.1f} ({nbytes / ms / 1e9:.2f})"  # noqa: E731
    default = results.get((cuda_decode.DEFAULT_CONFIG, served_grid))
    best = min(results, key=results.get) if results else None
    print(f"| {bs} x {ctx} | {us(served)} (S={served_grid}) | {us(default) if default else '-'} | "
          f"**{us(results[best]) if best else '-'}** {best} |", flush=True)
    per_config = []
    for config, knobs in cuda_decode.CONFIGS.items():
        mine = {k: v for k, v in results.items() if k[0] == config}
        if mine:
            k = min(mine, key=mine.get)
            per_config.append(f"{config}{knobs}: {mine[k] * 1e3:.1f}@{k[1]}")
    print("  per config (lanes/token, loads/lane, warps): best us @ S: " + "; ".join(per_config), flush=True)
    del kvs
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decode", default="1x1024,1x4096,2x2600r,4x2600r,6x2600r,8x2560r,12x2048r,16x2048r,6x512")
    parser.add_argument("--splits", default="8,16,32", help="grid split counts tried with every config (<= 32)")
    parser.add_argument("--layers", type=int, default=4, help="distinct K/V pools per timed call")
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    t0 = time.perf_counter()
    ext = cuda_decode.load()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {sms} SMs; extension build/load "
          f"{time.perf_counter() - t0:.1f} s ({'ok' if ext else cuda_decode.load_error})", flush=True)
    if ext is None:
        raise SystemExit(1)
    print("\n## decode attention, bf16 K/V, 32 q / 8 kv heads: Triton as served vs CUDA cores "
          "(us per layer call, TB/s of K+V read)")
    print("| bs x ctx | Triton as served (grid S) | CUDA, default config, served S | CUDA best (config, S) |")
    print("|---|---|---|---|")
    for bs, ctx in decode_cases(args.decode):
        run_case(bs, ctx, args.layers, [int(s) for s in args.splits.split(",")], sms)


if __name__ == "__main__":
    main()
