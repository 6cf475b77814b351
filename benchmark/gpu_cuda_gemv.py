"""The CUDA C++ small-batch GEMV (`radixlm_kernel.cuda_gemv`) against cuBLAS and cuBLASLt (CUDA only).

    python benchmark/gpu_cuda_gemv.py [--m 1,2,4,8]

Llama-3.1-8B projection shapes; each variant is checked against an fp32 matmul, then timed in a CUDA
graph over enough weight copies (>= 256 MB) that every call reads its weights from HBM, as a decode
step does. Prints us per call and the weight read rate, then the bs-1 decode step's matmul total
(32 layers + lm_head) with cuBLAS and with the best per-shape choice.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
import triton.testing

from radixlm_kernel import cuda_gemv

SHAPES = {"qkv": (6144, 4096), "o_proj": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}
PER_STEP = {"qkv": 32, "o_proj": 32, "gate_up": 32, "down": 32, "lm_head": 1}


def timed(fn, copies: int) -> float:
    fn()
    return triton.testing.do_bench_cudagraph(fn, rep=40) * 1e3 / copies  # us per call


def run_shape(name: str, m: int) -> dict[str, float]:
    n, k = SHAPES[name]
    nbytes = n * k * 2
    copies = max(2, -(-256 * 2 ** 20 // nbytes))
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ref = x.float() @ ws[0].float().T
    out = {"cublas": timed(lambda: [F.linear(x, w) for w in ws], copies)}
    torch.backends.cuda.preferred_blas_library("cublaslt")
    out["cublaslt"] = timed(lambda: [F.linear(x, w) for w in ws], copies)
    torch.backends.cuda.preferred_blas_library("cublas")
    for cfg in cuda_gemv.CONFIGS:
        for warps in (4, 8):
            y = cuda_gemv.gemv(x, ws[0], cfg, warps)
            err = (y.float() - ref).abs().max().item()
            if err > 2e-2 * ref.abs().max().item() + 1e-2:
                print(f"  {name} m={m} config {cfg} warps {warps}: max error {err:.3g} (ref max "
                      f"{ref.abs().max().item():.3g}) FAILED", flush=True)
                continue
            out[f"cuda{cfg}w{warps}"] = timed(lambda: [cuda_gemv.gemv(x, w, cfg, warps) for w in ws], copies)
    del ws
    torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", default="1,2,4,8")
    args = ap.parse_args()
    t0 = time.perf_counter()
    ext = cuda_gemv.load()
    print(f"extension build/load: {time.perf_counter() - t0:.1f} s ({'ok' if ext else cuda_gemv.load_error})",
          flush=True)
    if ext is None:
        raise SystemExit(1)
    print("| projection | M | cuBLAS us | cuBLASLt us | best CUDA GEMV us (config, TB/s) | best / cuBLAS |")
    print("|---|---|---|---|---|---|")
    totals: dict[int, dict[str, float]] = {}
    best_cfg: dict[tuple[str, int], str] = {}
    for m in [int(v) for v in args.m.split(",")]:
        tot = totals.setdefault(m, {"cublas": 0.0, "best": 0.0})
        for name in SHAPES:
            res = run_shape(name, m)
            cuda = {k: v for k, v in res.items() if k.startswith("cuda")}
            best = min(cuda, key=cuda.get) if cuda else None
            n, k = SHAPES[name]
            tbs = n * k * 2 / (res[best] * 1e-6) / 1e12 if best else float("nan")
            print(f"| {name} {n}x{k} | {m} | {res['cublas']:.1f} | {res['cublaslt']:.1f} | "
                  f"{res[best]:.1f} ({best}, {tbs:.2f}) | {res['cublas'] / res[best]:.2f}x |", flush=True)
            best_cfg[(name, m)] = best
            tot["cublas"] += PER_STEP[name] * res["cublas"]
            tot["best"] += PER_STEP[name] * min(res.values())
    for m, tot in totals.items():
        print(f"decode step matmuls at M={m}: cuBLAS {tot['cublas']:.0f} us, best per shape {tot['best']:.0f} us")
    print("best configs:", {f"{k[0]}@{k[1]}": v for k, v in best_cfg.items()})


if __name__ == "__main__":
    main()
