"""Where a decode step and a prefill spend their time on the GPU (CUDA only).

    python benchmark/gpu_profile.py --model-path .models/llama-3.1-8b --load-format dummy

For each decode case (batch x context) it reports, in one table:
- step: what `bench_one_batch` times (build the decode batch on the host, replay the graph,
  sample, synchronise), median over steps;
- graph: the captured graph alone, replayed back to back and timed with CUDA events (GPU time);
- host: the host-side time of building the batch and preparing the replay (no GPU wait);
- kernels: the sum of kernel durations of one eager step (torch.profiler), and the top kernels.
Contexts are made by pointing `req_to_token` rows at random pool slots (the KV content does
not change the cost), so long contexts need no prefill. It also profiles prefills (new tokens
over a cached prefix) and times the cuBLAS matmuls of one decode step alone in a graph (the
floor the fused step is held against).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

from radixlm.model_executor.forward_batch_builder import ForwardBatchBuilder
from radixlm.model_executor.model_runner import ModelRunner
from radixlm.server_args import ServerArgs

ACTIVITIES = ([torch.profiler.ProfilerActivity.CUDA] if torch.cuda.is_available()
              else [torch.profiler.ProfilerActivity.CPU])


def sync_time() -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def fake_context(runner: ModelRunner, bs: int, ctx: int) -> tuple[list[int], list[int]]:
    """`bs` request rows whose first `ctx` tokens point at freshly allocated pool slots."""
    rows = runner.req_to_token_pool.alloc(bs)
    slots = runner.token_to_kv_pool_allocator.alloc(bs * ctx)
    for i, row in enumerate(rows):
        runner.req_to_token_pool.write(row, 0, slots[i * ctx:(i + 1) * ctx])
    return rows, [ctx] * bs


def release(runner: ModelRunner, rows: list[int], seq_lens: list[int]) -> None:
    ForwardBatchBuilder.for_runner(runner).release(rows, seq_lens)


def kernel_table(prof: torch.profiler.profile, steps: int) -> list[tuple[str, int, float]]:
    """(kernel name, launches per step, us per step), largest first."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    on_cuda = torch.cuda.is_available()
    for evt in prof.events():
        if on_cuda and getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        if not on_cuda and (evt.cpu_parent is not None or not evt.name.startswith("aten::")):
            continue  # CPU smoke run: top-level aten ops
        name = evt.name[:60]
        totals[name][0] += 1
        totals[name][1] += evt.time_range.elapsed_us()
    rows = [(k, int(v[0] // steps), v[1] / steps) for k, v in totals.items()]
    return sorted(rows, key=lambda r: -r[2])


def idle_gaps(prof: torch.profiler.profile, steps: int, top: int = 8) -> list[tuple[str, str, float, float]]:
    """Where the device idles: (kernel before, kernel after, gaps per step, us per step) over the gaps of more
    than 1 us between consecutive device activities (kernels, copies, memsets), largest total first."""
    spans = sorted((e.time_range.start, e.time_range.end, e.name[:44]) for e in prof.events()
                   if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    busy_until, last_name = None, ""
    for start, end, name in spans:
        if busy_until is not None and start - busy_until > 1.0:
            totals[(last_name, name)][0] += 1
            totals[(last_name, name)][1] += start - busy_until
        if busy_until is None or end >= busy_until:
            busy_until, last_name = end, name
    rows = [(a, b, v[0] / steps, v[1] / steps) for (a, b), v in totals.items()]
    return sorted(rows, key=lambda r: -r[3])[:top]


def profile_decode(runner: ModelRunner, bs: int, ctx: int, steps: int = 30) -> dict:
    builder = ForwardBatchBuilder.for_runner(runner)
    rows, seq_lens = fake_context(runner, bs, ctx)
    ids = torch.randint(0, runner.model_config.vocab_size, (bs,), device=runner.device)
    step_s, host_s = [], []
    for _ in range(steps):
        t0 = sync_time()
        fb = builder.decode(rows, seq_lens, ids)
        host_s.append(time.perf_counter() - t0)
        ids = runner.forward(fb).next_token_ids
        step_s.append(sync_time() - t0)
        seq_lens = [n + 1 for n in seq_lens]
    out = {"bs": bs, "ctx": ctx, "step_ms": 1e3 * statistics.median(step_s[5:]),
           "build_ms": 1e3 * statistics.median(host_s[5:])}
    cg = runner.cuda_graph_runner
    if cg is not None and cg.can_run(fb):
        padded = cg.capture_bs[[b >= bs for b in cg.capture_bs].index(True)]
        graph = cg.graphs[padded]
        t_prep = []
        for _ in range(10):  # host cost of preparing a replay (copies into the static buffers)
            t0 = sync_time()
            cg.replay(fb)
            t_prep.append(time.perf_counter() - t0)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(20):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        out["graph_ms"] = start.elapsed_time(end) / 20
        out["replay_call_ms"] = 1e3 * statistics.median(t_prep)
    # one eager step under the profiler: the kernel breakdown
    saved, runner.cuda_graph_runner = runner.cuda_graph_runner, None
    try:
        fb = builder.decode(rows, seq_lens, ids)
        runner.forward_logits(fb)  # warm
        seq_lens = [n + 1 for n in seq_lens]
        fb = builder.decode(rows, seq_lens, ids)
        seq_lens = [n + 1 for n in seq_lens]
        sync_time()
        with torch.profiler.profile(activities=ACTIVITIES) as prof:
            runner.forward_logits(fb)
            sync_time()
        t0 = sync_time()
        runner.forward_logits(builder.decode(rows, seq_lens, ids))
        out["eager_ms"] = 1e3 * (sync_time() - t0)
        seq_lens = [n + 1 for n in seq_lens]
    finally:
        runner.cuda_graph_runner = saved
    table = kernel_table(prof, 1)
    out["kernels_ms"] = sum(r[2] for r in table) / 1e3
    out["num_kernels"] = sum(r[1] for r in table)
    out["top"] = table[:14]
    release(runner, rows, seq_lens)
    return out


def profile_overlapped(runner: ModelRunner, bs: int, ctx: int, steps: int = 40) -> dict:
    """The overlapped decode loop (bench_one_batch's second column: each step built from the last one's device
    tensors while the device runs it): wall ms per step, GPU kernel time per step (kernels inside graph
    replays included) and the rest, the device's idle time; plus the kernels launched at most twice a step."""
    builder = ForwardBatchBuilder.for_runner(runner)
    rows, seq_lens = fake_context(runner, bs, ctx)
    ids = torch.randint(0, runner.model_config.vocab_size, (bs,), device=runner.device)
    fb = builder.decode(rows, seq_lens, ids)
    out = runner.forward(fb)

    def run(n: int) -> None:
        nonlocal fb, out
        for _ in range(n):
            fb = builder.decode_next(fb, out.next_token_ids)
            out = runner.forward(fb)

    run(5)
    t0 = sync_time()
    run(steps)
    wall_ms = 1e3 * (sync_time() - t0) / steps
    with torch.profiler.profile(activities=ACTIVITIES) as prof:
        run(steps)
        sync_time()
    table = kernel_table(prof, steps)
    busy_ms = sum(r[2] for r in table) / 1e3
    release(runner, rows, fb.seq_lens_cpu)
    return {"bs": bs, "ctx": ctx, "wall_ms": wall_ms, "busy_ms": busy_ms,
            "few": [r for r in table if r[1] <= 2][:12], "gaps": idle_gaps(prof, steps)}


def profile_prefill(runner: ModelRunner, num_reqs: int, prefix: int, new: int) -> dict:
    builder = ForwardBatchBuilder.for_runner(runner)
    rows, _ = fake_context(runner, num_reqs, prefix) if prefix else (runner.req_to_token_pool.alloc(num_reqs), None)
    vocab = runner.model_config.vocab_size
    prompts = torch.randint(0, vocab, (num_reqs, new)).tolist()
    fb = builder.extend(rows, [prefix] * num_reqs, prompts)
    runner.forward(fb)  # warm (first-use compiles)
    runner.token_to_kv_pool_allocator.free(fb.out_cache_loc)
    times = []
    for _ in range(3):
        fb = builder.extend(rows, [prefix] * num_reqs, prompts)
        t0 = sync_time()
        runner.forward(fb)
        times.append(sync_time() - t0)
        runner.token_to_kv_pool_allocator.free(fb.out_cache_loc)
    fb = builder.extend(rows, [prefix] * num_reqs, prompts)
    with torch.profiler.profile(activities=ACTIVITIES) as prof:
        runner.forward(fb)
        sync_time()
    table = kernel_table(prof, 1)
    release(runner, rows, [prefix + new] * num_reqs)
    ms = 1e3 * statistics.median(times)
    return {"reqs": num_reqs, "prefix": prefix, "new": new, "ms": ms, "tok_s": num_reqs * new / (ms / 1e3),
            "kernels_ms": sum(r[2] for r in table) / 1e3, "top": table[:8]}


def matmul_floor(runner: ModelRunner) -> float:
    """The decode step's matmuls alone (bs 1, every layer's projections plus the LM head) in a graph."""
    model = runner.model
    weights = []
    for layer in model.model.layers:
        weights += [layer.self_attn.qkv_proj.weight, layer.self_attn.o_proj.weight, layer.mlp.gate_up_proj.weight,
                    layer.mlp.down_proj.weight]
    weights.append(model.lm_head.weight)
    xs = {w.shape[1]: torch.randn(1, w.shape[1], device=runner.device, dtype=w.dtype) for w in weights}

    def step() -> None:
        for w in weights:
            torch.matmul(xs[w.shape[1]], w.T)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(20):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--load-format", default="dummy")
    parser.add_argument("--attention-backend", default=None)
    parser.add_argument("--decode", default="1x256,1x4096,64x512,64x2048,256x2048",
                        help="comma-separated BSxCTX decode cases")
    parser.add_argument("--prefill", default="1x0x8192,4x0x2048,1x4096x4096,16x2048x128",
                        help="comma-separated REQSxPREFIXxNEW prefill cases")
    parser.add_argument("--overlap", default="", help="comma-separated BSxCTX cases of the overlapped decode loop")
    parser.add_argument("--cuda-graph-max-bs", type=int, default=256)
    parser.add_argument("--kv-cache-dtype", default="auto", help="auto (the model dtype) or fp8_e4m3 / fp8_e5m2")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself")
    args = parser.parse_args()
    decode = [tuple(int(x) for x in c.split("x")) for c in args.decode.split(",") if c]
    overlap = [tuple(int(x) for x in c.split("x")) for c in args.overlap.split(",") if c]
    prefill = [tuple(int(x) for x in c.split("x")) for c in args.prefill.split(",") if c]
    need = max([b * (c + 64) for b, c in decode] + [b * (c + 128) for b, c in overlap]
               + [r * (p + n) for r, p, n in prefill]) + 1024
    server_args = ServerArgs(model_path=args.model_path, load_format=args.load_format,
                             dtype="bfloat16" if args.device == "cuda" else "float32", device=args.device, attention_backend=args.attention_backend, max_total_tokens=need,
                             max_running_requests=max([b for b, _ in decode + overlap] + [r for r, _, _ in prefill]),
                             cuda_graph_max_bs=args.cuda_graph_max_bs, kv_cache_dtype=args.kv_cache_dtype).resolved()
    runner = ModelRunner(server_args)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}, backend {server_args.attention_backend}, "
          f"graphs up to bs {args.cuda_graph_max_bs}, kv cache {server_args.kv_cache_dtype}")
    if args.device == "cuda":
        print(f"matmuls alone (bs 1, in a graph): {matmul_floor(runner):.3f} ms")
    print("\n| bs | ctx | step ms | graph ms (GPU) | build batch ms | replay call ms | eager ms | "
          "kernel sum ms | kernels |")
    print("|---|---|---|---|---|---|---|---|---|")
    details = []
    for bs, ctx in decode:
        r = profile_decode(runner, bs, ctx)
        details.append(r)
        print(f"| {bs} | {ctx} | {r['step_ms']:.3f} | {r.get('graph_ms', float('nan')):.3f} | {r['build_ms']:.3f} | "
              f"{r.get('replay_call_ms', float('nan')):.3f} | {r['eager_ms']:.2f} | {r['kernels_ms']:.3f} | "
              f"{r['num_kernels']} |", flush=True)
    for r in details:
        print(f"\ndecode bs {r['bs']} ctx {r['ctx']}: top kernels (launches/step, us/step)")
        for name, n, us in r["top"]:
            print(f"  {us:9.1f} us  x{n:<4d} {name}")
    if overlap:
        print("\n| bs | ctx | overlapped step ms (wall) | GPU kernels ms | GPU idle ms |")
        print("|---|---|---|---|---|")
    for bs, ctx in overlap:
        r = profile_overlapped(runner, bs, ctx)
        print(f"| {bs} | {ctx} | {r['wall_ms']:.3f} | {r['busy_ms']:.3f} | {r['wall_ms'] - r['busy_ms']:.3f} |")
        print(f"overlapped bs {bs} ctx {ctx}: kernels launched at most twice a step (launches/step, us/step)")
        for name, n, us in r["few"]:
            print(f"  {us:9.1f} us  x{n:<4d} {name}")
        print(f"overlapped bs {bs} ctx {ctx}: device idle > 1 us (us/step, gaps/step, kernel before -> kernel after)")
        for before, after, n, us in r["gaps"]:
            print(f"  {us:9.1f} us  x{n:<5.1f} {before} -> {after}")
    print("\n| reqs | prefix | new | ms | new tok/s | kernel sum ms |")
    print("|---|---|---|---|---|---|")
    pre = []
    for reqs, prefix, new in prefill:
        r = profile_prefill(runner, reqs, prefix, new)
        pre.append(r)
        print(f"| {reqs} | {prefix} | {new} | {r['ms']:.1f} | {r['tok_s']:.0f} | {r['kernels_ms']:.1f} |", flush=True)
    for r in pre:
        print(f"\nprefill {r['reqs']}x({r['prefix']}+{r['new']}): top kernels (launches, us)")
        for name, n, us in r["top"]:
            print(f"  {us:9.1f} us  x{n:<4d} {name}")


if __name__ == "__main__":
    main()
