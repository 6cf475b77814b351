"""Sweep the small-batch GEMV kernels' launch settings on Llama-3.1-8B shapes (CUDA only).

    python benchmark/gpu_gemv_sweep.py              # 5 projections x M in {1, 2, 4, 8, 16}, about 2 min

For each projection (qkv, o_proj, gate_up, down, lm_head, bf16) and M tokens, every config of a small
grid is checked against the float32 reference, then timed in a CUDA graph of 20 calls that rotate
through enough weight copies that L2 (50 MB) serves none of them; the time is the median replay over
the calls. Against it: cuBLAS alone (`F.linear` on an already normalised input) and the unfused sequence
the fused kernel replaces (fused_add_rmsnorm + F.linear; silu_and_mul + F.linear; final norm + lm_head +
`.float()`). Prints a table per projection, the decode-step estimate (32 layers + lm_head) per M, and a
last JSON line: the best config per (N, K, M bucket) (`radixlm_kernel.gemv.SHAPE_CONFIGS`), one per M
bucket for other shapes (`CONFIGS`), and the largest M at which the fused layer still beats the unfused
one (`layers/kernel_dispatch.py` FUSED_GEMV_MAX_TOKENS). Triton compiles each config once; `--jobs`
worker processes compile them all first (into Triton's disk cache) so the sweep fits in the budget.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
import triton

import radixlm_kernel as K
from radixlm_kernel import gemv as G
from radixlm_kernel import reference as R

from radixlm.provenance import git_commit

DEV, DT = "cuda", torch.bfloat16
EPS = 1e-5
LAYERS = 32
L2_FLUSH_BYTES = 160 << 20  # the weight copies of one graph together exceed 3x the H200's L2
CALLS, REPLAYS = 20, 15


@dataclass(frozen=True)
class Shape:
    name: str
    n: int
    k: int
    prologue: str  # "norm" (add + RMSNorm, new residual written), "plain", "silu", "final" (norm, fp32 out)


SHAPES = [Shape("qkv", 6144, 4096, "norm"), Shape("o_proj", 4096, 4096, "plain"),
          Shape("gate_up", 28672, 4096, "norm"), Shape("down", 4096, 14336, "silu"),
          Shape("lm_head", 128256, 4096, "final")]
MS = [1, 2, 4, 8, 16]

# (dot, BLOCK_N, BLOCK_K, num_warps, num_stages); FMA loads are not software-pipelined, stages stay 1
FMA_M1 = [(False, 16, 256, 4, 1), (False, 16, 512, 4, 1), (False, 8, 512, 4, 1), (False, 16, 512, 8, 1),
          (False, 32, 256, 8, 1), (False, 8, 1024, 8, 1)]
FMA_M2 = [(False, 16, 128, 4, 1), (False, 8, 256, 4, 1), (False, 16, 256, 8, 1)]
DOT = [(True, 16, 128, 4, 4), (True, 16, 256, 4, 3), (True, 32, 128, 4, 4), (True, 32, 256, 4, 3),
       (True, 64, 128, 4, 3), (True, 16, 512, 8, 2)]


def grid_for(m: int, quick: bool) -> list[G.GemvConfig]:
    rows = FMA_M1 + DOT[:2] if m == 1 else FMA_M2 + DOT[:4] if m == 2 else DOT
    cfgs = [G.GemvConfig(*r) for r in rows]
    return cfgs[:3] if quick else cfgs


class Case:
    """Inputs of one (shape, M): the fused op, cuBLAS on the normalised input, the unfused sequence."""

    def __init__(self, shape: Shape, m: int, weights: list[torch.Tensor]) -> None:
        self.shape, self.m, self.w = shape, m, weights
        k = shape.k
        self.x = torch.randn(m, 2 * k if shape.prologue == "silu" else k, device=DEV, dtype=DT)
        self.res = torch.randn(m, k, device=DEV, dtype=DT)
        self.g = (1 + 0.1 * torch.randn(k, device=DEV)).to(DT)
        if shape.prologue == "silu":
            self.x_normed = R.silu_and_mul_ref(self.x)
        elif shape.prologue == "plain":
            self.x_normed = self.x
        else:
            self.x_normed = R.rmsnorm_ref((self.x.float() + self.res.float()).to(DT), self.g, EPS)
        self.want: Optional[torch.Tensor] = None

    def fused(self, i: int) -> torch.Tensor:
        w, p = self.w[i % len(self.w)], self.shape.prologue
        if p == "plain":
            return K.linear_gemv(self.x, w)
        if p == "silu":
            return K.silu_mul_gemv(self.x, w)
        final = p == "final"
        return K.rmsnorm_gemv(self.x, self.res, self.g, EPS, w, store_residual=not final,
                              out_dtype=torch.float32 if final else None)[0]

    def cublas(self, i: int) -> torch.Tensor:
        return F.linear(self.x_normed, self.w[i % len(self.w)])

    def unfused_fn(self) -> Callable[[int], torch.Tensor]:
        p = self.shape.prologue
        x, res = self.x.clone(), self.res.clone()  # fused_add_rmsnorm works in place

        def run(i: int) -> torch.Tensor:
            w = self.w[i % len(self.w)]
            if p == "plain":
                return F.linear(x, w)
            if p == "silu":
                return F.linear(K.silu_and_mul(x), w)
            K.fused_add_rmsnorm(x, res, self.g, EPS)
            out = F.linear(x, w)
            return out.float() if p == "final" else out

        return run

    def rel_error(self) -> float:
        """max |fused - reference| / max |reference|, the reference in float32 (computed once)."""
        if self.want is None:
            w, p = self.w[0], self.shape.prologue
            if p == "plain":
                self.want = R.linear_gemv_ref(self.x, w, out_dtype=torch.float32)
            elif p == "silu":
                self.want = R.silu_mul_gemv_ref(self.x, w, out_dtype=torch.float32)
            else:
                self.want = R.rmsnorm_gemv_ref(self.x, self.res, self.g, EPS, w, out_dtype=torch.float32)[0]
        got = self.fused(0).float()
        return ((got - self.want).abs().max() / self.want.abs().max().clamp_min(1e-6)).item()


def graph_us(fn: Callable[[int], torch.Tensor]) -> float:
    """Median time per call of a CUDA graph of CALLS calls, over REPLAYS replays."""
    fn(0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(CALLS):
            fn(i)
    graph.replay()
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / CALLS)
    del graph
    return statistics.median(times)


def weights_for(shape: Shape) -> list[torch.Tensor]:
    size = shape.n * shape.k * 2
    copies = max(1, math.ceil(L2_FLUSH_BYTES / size))
    return [(torch.randn(shape.n, shape.k, device=DEV) * shape.k ** -0.5).to(DT) for _ in range(copies)]


def set_config(cfg: G.GemvConfig) -> None:
    G.CONFIGS = {b: cfg for b in MS}
    G.SHAPE_CONFIGS = {}


def _compile_job(job: tuple[str, int, int, str, int, tuple]) -> Optional[str]:
    """In a worker: launch one (shape, M, config) once, so Triton's disk cache holds its binary."""
    name, n, k, prologue, m, cfg = job
    set_config(G.GemvConfig(*cfg))
    try:
        Case(Shape(name, n, k, prologue), m, [torch.empty(n, k, device=DEV, dtype=DT).normal_()]).fused(0)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a config that does not fit (shared memory) is reported, then skipped
        return f"{name} M={m} {cfg}: {type(e).__name__}"
    return None


def precompile(shapes: list[Shape], quick: bool, jobs: int) -> None:
    """One binary per (prologue variant, M, config): qkv and gate_up share theirs."""
    seen, work = set(), []
    for s in shapes:
        for m in MS:
            for cfg in grid_for(m, quick) + [G.config_for(s.n, s.k, m)]:
                key = (s.prologue, s.k, m, cfg)
                if key not in seen:
                    seen.add(key)
                    work.append((s.name, s.n, s.k, s.prologue, m, _tuple(cfg)))
    t0 = time.time()
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        failed = [r for r in pool.imap_unordered(_compile_job, work) if r]
    print(f"compiled {len(work)} kernels with {jobs} workers in {time.time() - t0:.0f} s"
          + (f"; failed: {failed}" if failed else ""), flush=True)


def sweep_shape(shape: Shape, quick: bool) -> dict[int, dict]:
    weights = weights_for(shape)
    nbytes = shape.n * shape.k * 2
    default = {m: G.config_for(shape.n, shape.k, m) for m in MS}
    saved = (G.CONFIGS, G.SHAPE_CONFIGS)
    out: dict[int, dict] = {}
    print(f"\n## {shape.name}: N={shape.n} K={shape.k} ({shape.prologue}), {len(weights)} weight copies")
    print("| M | best config (dot, BLOCK_N, BLOCK_K, warps, stages) | us | TB/s | default us | cuBLAS us | "
          "unfused us | vs unfused |")
    print("|---|---|---|---|---|---|---|---|")
    for m in MS:
        case = Case(shape, m, weights)
        results: dict[G.GemvConfig, float] = {}
        for cfg in dict.fromkeys([default[m]] + grid_for(m, quick)):
            set_config(cfg)
            try:
                err = case.rel_error()
                if not err < 2e-2:
                    print(f"  M={m} {cfg}: rel. error {err:.3g}, skipped")
                    continue
                results[cfg] = graph_us(case.fused)
            except Exception as e:  # noqa: BLE001 - out of shared memory etc.
                print(f"  M={m} {cfg}: {type(e).__name__}")
        G.CONFIGS, G.SHAPE_CONFIGS = saved
        cublas, unfused = graph_us(case.cublas), graph_us(case.unfused_fn())
        best = min(results, key=results.get)
        us = results[best]
        out[m] = {"best": best, "us": us, "all": results, "cublas": cublas, "unfused": unfused}
        print(f"| {m} | {_tuple(best)} | {us:.1f} | {nbytes / us / 1e6:.2f} | "
              f"{results.get(default[m], float('nan')):.1f} | {cublas:.1f} | {unfused:.1f} | {unfused / us:.2f}x |",
              flush=True)
    del weights
    torch.cuda.empty_cache()
    return out


def step_estimate(res: dict[str, dict[int, dict]]) -> dict[int, tuple[float, float]]:
    """(fused, unfused) us of the matmul part of a decode step: 32 x (qkv + o + gate_up + down) + lm_head."""
    est = {}
    print("\n## decode-step estimate, matmuls and what they absorb (32 layers + lm_head)")
    print("| M | fused us | unfused us | saved us |")
    print("|---|---|---|---|")
    for m in MS:
        f = sum(LAYERS * res[s][m]["us"] for s in ("qkv", "o_proj", "gate_up", "down")) + res["lm_head"][m]["us"]
        u = (sum(LAYERS * res[s][m]["unfused"] for s in ("qkv", "o_proj", "gate_up", "down"))
             + res["lm_head"][m]["unfused"])
        est[m] = (f, u)
        print(f"| {m} | {f:.0f} | {u:.0f} | {u - f:.0f} |")
    return est


def bucket_configs(res: dict[str, dict[int, dict]]) -> dict[int, G.GemvConfig]:
    """Per M: the config with the least step time over all shapes (among those measured on every shape)."""
    weight = {"qkv": LAYERS, "o_proj": LAYERS, "gate_up": LAYERS, "down": LAYERS, "lm_head": 1}
    out = {}
    for m in MS:
        common = set.intersection(*(set(res[s][m]["all"]) for s in res))
        if common:
            out[m] = min(common, key=lambda c: sum(weight[s] * res[s][m]["all"][c] for s in res))
    return out


def _tuple(cfg: G.GemvConfig) -> tuple:
    return tuple(vars(cfg).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="three configs per M")
    parser.add_argument("--jobs", type=int, default=12, help="compile workers (0: compile on first use)")
    parser.add_argument("--shapes", default=",".join(s.name for s in SHAPES))
    args = parser.parse_args()
    shapes = [s for s in SHAPES if s.name in args.shapes.split(",")]
    t0 = time.time()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"commit {git_commit(__file__)}; bf16, Llama-3.1-8B projections, graphs of {CALLS} calls, median of {REPLAYS}")
    torch.manual_seed(0)
    if args.jobs > 0:
        precompile(shapes, args.quick, args.jobs)
    res = {s.name: sweep_shape(s, args.quick) for s in shapes}
    best = {(s.n, s.k, m): r["best"] for s in shapes for m, r in res[s.name].items()}
    decision: dict = {"shape_configs": {",".join(map(str, key)): _tuple(c) for key, c in best.items()}}
    print("\npaste into radixlm_kernel/gemv.py:")
    print("SHAPE_CONFIGS = {" + ", ".join(f"{key}: GemvConfig{_tuple(c)}" for key, c in best.items()) + "}")
    if len(shapes) == len(SHAPES):
        est = step_estimate(res)
        max_m = 0
        for m in MS:  # the largest M up to which every measured M is faster fused
            if est[m][0] >= est[m][1]:
                break
            max_m = m
        buckets = bucket_configs(res)
        decision.update(configs={m: _tuple(c) for m, c in buckets.items()}, max_fused_tokens=max_m,
                        step_us_m1={"fused": round(est[1][0]), "unfused": round(est[1][1])})
        print("CONFIGS = {" + ", ".join(f"{m}: GemvConfig{_tuple(c)}" for m, c in buckets.items()) + "}")
        print(f"FUSED_GEMV_MAX_TOKENS = {max_m}  # layers/kernel_dispatch.py")
    print(f"sweep done in {time.time() - t0:.0f} s")
    print(json.dumps({"gemv_sweep": decision}))


if __name__ == "__main__":
    main()
