"""The decode projections at small M in both operand orders, in a CUDA graph (issue 11).

    python3 benchmark/gpu_gemm_layout.py [--m 1,2,4,8] [--copies 8]

`F.linear(x, W)` asks cuBLAS for `x W^T` (M rows of activations); `torch.mm(W, x^T)` asks for the
same numbers as `W x^T`, a problem whose "M" is the weight's N, for which cuBLAS's heuristics may pick
other kernels (GEMV-like ones at one column). `torch.mm(x, W^T, out_dtype=float32)` keeps cuBLAS's
float32 result (a split-K GEMM may then skip its bf16 reduce kernel). At M = 1 there is also
`torch.mv(W, x[0])`. Each case replays a graph of `--copies` calls over distinct weight copies (larger
than L2 together, so the weights come from HBM as in a model step) and reports us per call and the
weight-read bandwidth.
"""

from __future__ import annotations

import argparse
from typing import Callable

import torch
import torch.nn.functional as F

SHAPES = {"qkv": (6144, 4096), "o_proj": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}


def graph_us(fn: Callable[[], object], calls: int, reps: int = 20) -> float:
    """us per call of `fn` (which makes `calls` calls), replayed in a CUDA graph."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return sorted(times)[len(times) // 2]


def cases(x: torch.Tensor, ws: list[torch.Tensor]) -> dict[str, Callable[[], object]]:
    out = {"linear x W^T": lambda: [F.linear(x, w) for w in ws],
           "mm W x^T": lambda: [torch.mm(w, x.t()).t() for w in ws],
           "mm fp32 out": lambda: [torch.mm(x, w.t(), out_dtype=torch.float32) for w in ws]}
    if x.shape[0] == 1:
        out["mv W x"] = lambda: [torch.mv(w, x[0]) for w in ws]
    return out


def check(x: torch.Tensor, w: torch.Tensor) -> float:
    ref = F.linear(x.float(), w.float())
    return max(float((torch.mm(w, x.t()).t().float() - ref).abs().max()),
               float((F.linear(x, w).float() - ref).abs().max()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", default="1,2,4,8")
    ap.add_argument("--copies", type=int, default=8)
    args = ap.parse_args()
    torch.manual_seed(0)
    labels = ["linear x W^T", "mm W x^T", "mm fp32 out", "mv W x"]
    print("| projection | M | " + " | ".join(labels) + " | max abs err vs fp32 |")
    print("|---|---|" + "---|" * (len(labels) + 1))
    for name, (n, k) in SHAPES.items():
        copies = 2 if name == "lm_head" else args.copies
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        gb = n * k * 2 / 1e9
        for m in [int(v) for v in args.m.split(",")]:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            cells = []
            for label, fn in cases(x, ws).items():
                us = graph_us(fn, copies)
                cells.append(f"{us:.1f} ({gb / us * 1e3:.2f} TB/s)")
            cells += ["-"] * (len(labels) - len(cells))
            print(f"| {name} {n} x {k} | {m} | " + " | ".join(cells) + f" | {check(x, ws[0]):.3g} |")
        del ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
