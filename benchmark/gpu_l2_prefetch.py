"""Does an L2 prefetch make a bs-1 GEMV faster? (CUDA only; a diagnostic for `layers/weight_prefetch.py`.)

    python benchmark/gpu_l2_prefetch.py

For each Llama-3.1-8B projection at M = 1, in CUDA graphs, us per call:
- cold: the GEMV over rotated weight copies (each call reads its weight from HBM);
- hot: the same weight again right after reading it (L2 holds what fits);
- gap+cold: a spin kernel of about the attention's length, then the cold GEMV;
- gap+prefetch: the same with the weight's prefetch forked beside the spin kernel (bulk and lines forms).
"""

from __future__ import annotations

import argparse

import torch

from radixlm_kernel.l2_prefetch import l2_prefetch

SHAPES = {"o_proj": (4096, 4096), "qkv": (6144, 4096), "down": (4096, 14336), "gate_up": (28672, 4096)}


def graph_us(fn, reps: int = 20) -> float:
    """us per call of `fn` (which runs `reps` calls), captured in a CUDA graph and replayed."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (5 * reps)


def case(name: str, n: int, k: int, spin_cycles: int, copies: int = 8) -> dict:
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    side = torch.cuda.Stream()
    reps = 2 * copies

    def cold():
        for i in range(reps):
            torch.mm(x, ws[i % copies].T)

    def hot():
        for i in range(reps // 2):
            torch.mm(x, ws[i % copies].T)
            torch.mm(x, ws[i % copies].T)

    def gap(prefetch: str | None):
        def run():
            for i in range(reps):
                w = ws[i % copies]
                if prefetch:
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        l2_prefetch(w, form=prefetch)
                torch.cuda._sleep(spin_cycles)
                if prefetch:
                    torch.cuda.current_stream().wait_stream(side)
                torch.mm(x, w.T)
        return run

    spin = graph_us(lambda: [torch.cuda._sleep(spin_cycles) for _ in range(reps)], reps)
    return {"shape": f"{name} {n}x{k}", "MB": n * k * 2 / 2**20, "cold": graph_us(cold, reps),
            "hot (pairs)": 2 * graph_us(hot, reps) - graph_us(cold, reps), "spin": spin,
            "spin+cold": graph_us(gap(None), reps), "spin+bulk": graph_us(gap("bulk"), reps),
            "spin+lines": graph_us(gap("lines"), reps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spin-cycles", type=int, default=14000, help="spin kernel length (about 7 us)")
    args = parser.parse_args()
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; spin {args.spin_cycles} cycles")
    rows = [case(name, n, k, args.spin_cycles) for name, (n, k) in SHAPES.items()]
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(v if isinstance(v, str) else f"{v:.1f}" for v in r.values()) + " |")


if __name__ == "__main__":
    main()
