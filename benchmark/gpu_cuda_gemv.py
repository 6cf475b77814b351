"""The CUDA C++ small-batch GEMVs (`radixlm_kernel.cuda_gemv`) against what they replace (CUDA only).

    python benchmark/gpu_cuda_gemv.py [--m 1,2,4,8]

Llama-3.1-8B projections, each with the ops the decode layers fold into it: qkv after add + RMSNorm,
gate_up between add + RMSNorm and SiLU-and-mul, o_proj and down plain, lm_head after the final norm with
float32 logits. For
every launch config the fused kernel is checked against a float32 reference of the whole op, then timed
in a CUDA graph over enough weight copies (>= 256 MB) that every call reads its weights from HBM, as a
decode step does; beside it, cuBLAS alone and the unfused sequence (our Triton norm / SiLU kernel, then
cuBLAS). Prints us per call, the best config per shape and M as the `LAUNCH` table of cuda_gemv.py, and
the decode step's total (32 layers + lm_head) for the unfused sequence and the best fused kernels.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import torch
import torch.nn.functional as F
import triton.testing

import radixlm_kernel as rk
from radixlm_kernel import cuda_gemv

# name: (N, K, variant, output dtype)
SHAPES = {"qkv": (6144, 4096, "norm", torch.bfloat16), "o_proj": (4096, 4096, "plain", torch.bfloat16),
          "gate_up": (28672, 4096, "norm_silu", torch.bfloat16), "down": (4096, 14336, "plain", torch.bfloat16),
          "lm_head": (128256, 4096, "norm", torch.float32)}
PER_STEP = {"qkv": 32, "o_proj": 32, "gate_up": 32, "down": 32, "lm_head": 1}
EPS = 1e-5


def timed(fn: Callable[[], object], copies: int) -> float:
    fn()
    return triton.testing.do_bench_cudagraph(fn, rep=40) * 1e3 / copies  # us per call


class Case:
    """Inputs of one projection at M rows, its float32 reference, and the three ways to compute it."""

    def __init__(self, name: str, m: int) -> None:
        self.n, self.k, self.variant, self.out_dtype = SHAPES[name]
        n, k = self.n, self.k
        self.copies = max(2, -(-256 * 2 ** 20 // (n * k * 2)))
        self.ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5 for _ in range(self.copies)]
        self.x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        self.res = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        self.g = (1 + 0.1 * torch.randn(k, device="cuda")).to(torch.bfloat16)
        self.x_scratch, self.res_scratch = self.x.clone(), self.res.clone()
        self.ref = self._reference()

    def _x_prime(self) -> torch.Tensor:
        if self.variant == "plain":
            return self.x.float()
        h = (self.x.float() + self.res.float()).to(torch.bfloat16).float()
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * self.g.float()

    def _reference(self) -> torch.Tensor:
        y = self._x_prime() @ self.ws[0].float().T
        if self.variant != "norm_silu":
            return y
        gate, up = y.to(torch.bfloat16).float().chunk(2, dim=-1)
        return F.silu(gate) * up

    def fused(self, w: torch.Tensor, config: int, warps: int) -> torch.Tensor:
        if self.variant == "plain":
            return cuda_gemv._run(cuda_gemv.PLAIN, self.x, w, self.k, None, self.out_dtype, config=config, warps=warps)
        variant, cols = ((cuda_gemv.NORM_SILU_MUL, self.n // 2) if self.variant == "norm_silu"
                         else (cuda_gemv.NORM, self.n))
        return cuda_gemv._run(variant, self.x, w, self.k, None, self.out_dtype, self.res, torch.empty_like(self.res),
                              self.g, EPS, config, warps, out_cols=cols)

    def unfused(self, w: torch.Tensor, scratch: bool = True) -> torch.Tensor:
        """The runtime's unfused sequence; the norm runs in place on scratch copies (timing), or on fresh
        clones of the inputs (`scratch=False`, for the error)."""
        x = self.x
        if self.variant != "plain":
            if scratch:
                x, res = self.x_scratch, self.res_scratch
            else:
                x, res = x.clone(), self.res.clone()
            rk.fused_add_rmsnorm(x, res, self.g, EPS)
        y = F.linear(x, w)
        if self.variant == "norm_silu":
            y = rk.silu_and_mul(y)
        return y.float() if self.out_dtype == torch.float32 else y


def run_shape(name: str, m: int) -> dict[str, float]:
    case = Case(name, m)
    scale = case.ref.abs().max().item()
    out = {"cublas": timed(lambda: [F.linear(case.x, w) for w in case.ws], case.copies),
           "unfused": timed(lambda: [case.unfused(w) for w in case.ws], case.copies)}
    err_unfused = (case.unfused(case.ws[0], scratch=False).float() - case.ref).abs().max().item()
    for cfg in cuda_gemv.ALL_CONFIGS:
        for warps in (4, 8):
            y = case.fused(case.ws[0], cfg, warps)
            err = (y.float() - case.ref).abs().max().item()
            if y.dtype != case.out_dtype or err > 2 * err_unfused + 1e-2 * scale:
                print(f"  {name} m={m} config {cfg} warps {warps}: max error {err:.3g} against the unfused "
                      f"path's {err_unfused:.3g} (ref max {scale:.3g}) FAILED", flush=True)
                continue
            out[f"cfg{cfg}w{warps}"] = timed(lambda: [case.fused(w, cfg, warps) for w in case.ws], case.copies)
    del case
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
    print("| projection (variant) | M | cuBLAS alone | unfused (kernel + cuBLAS) | best fused (config, TB/s) | "
          "unfused / fused |")
    print("|---|---|---|---|---|---|")
    totals: dict[int, dict[str, float]] = {}
    launch: dict[tuple[int, int, int], tuple[int, int]] = {}
    for m in [int(v) for v in args.m.split(",")]:
        tot = totals.setdefault(m, {"unfused": 0.0, "fused": 0.0})
        for name, (n, k, variant, _) in SHAPES.items():
            res = run_shape(name, m)
            fused = {key: v for key, v in res.items() if key.startswith("cfg")}
            if not fused:
                print(f"| {name} ({variant}) | {m} | {res['cublas']:.1f} | {res['unfused']:.1f} | FAILED | - |")
                continue
            best = min(fused, key=fused.get)
            cfg, warps = (int(v) for v in best[3:].split("w"))
            launch[(n, k, 1 if m <= 1 else 2 if m == 2 else 4 if m <= 4 else 8)] = (cfg, warps)
            tbs = n * k * 2 / (res[best] * 1e-6) / 1e12
            print(f"| {name} ({variant}) | {m} | {res['cublas']:.1f} | {res['unfused']:.1f} | {res[best]:.1f} "
                  f"({best}, {tbs:.2f}) | {res['unfused'] / res[best]:.2f}x |", flush=True)
            tot["unfused"] += PER_STEP[name] * res["unfused"]
            tot["fused"] += PER_STEP[name] * res[best]
    for m, tot in totals.items():
        print(f"decode step projections at M={m}: unfused {tot['unfused']:.0f} us, fused {tot['fused']:.0f} us")
    print("LAUNCH =", {key: launch[key] for key in sorted(launch)})


if __name__ == "__main__":
    main()
