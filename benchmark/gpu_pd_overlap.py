"""Can a prefill and decode steps share the GPU at once? (CUDA only; the question behind issue 11's bf16 goal.)

    python benchmark/gpu_pd_overlap.py --model-path .models/llama-3.1-8b --load-format dummy

A prefill is compute-bound and a large decode step mostly bandwidth-bound, so running them at the same
time could finish both sooner than one after the other. For each case (decode BS x CTX beside a
prefill of REQS x NEW fresh tokens) this times, on the real model runner:
- serial: the prefill alone plus N decode steps alone (N chosen so the decode steps take about as long
  as the prefill), and the two launched back to back on one stream;
- concurrent: the prefill on one stream and the N decode steps on another, launched together, with
  either stream (or neither) at high priority; optionally with the prefill's cuBLAS matmuls held to
  fewer SMs (torch's SM carve-out) or the prefill on a green context of fewer SMs.
Each variant's wall time (both done), when the decode and the prefill finished, and the gain against
serial. Decode contexts point at random pool slots, as in gpu_profile.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _REPO_ROOT / "benchmark"]

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Callable, Optional  # noqa: E402

import torch  # noqa: E402

from radixlm.benchmark.gpu_profile import fake_context, release  # noqa: E402
from radixlm.model_executor.forward_batch_builder import ForwardBatchBuilder  # noqa: E402
from radixlm.model_executor.model_runner import ModelRunner  # noqa: E402
from radixlm.server_args import ServerArgs  # noqa: E402


class Case:
    def __init__(self, runner: ModelRunner, bs: int, ctx: int, reqs: int, new: int) -> None:
        self.runner, self.bs, self.ctx = runner, bs, ctx
        self.builder = ForwardBatchBuilder.for_runner(runner)
        self.rows, _ = fake_context(runner, bs, ctx)
        self.prefill_rows = runner.req_to_token_pool.alloc(reqs)
        vocab = runner.model_config.vocab_size
        self.prompts = torch.randint(0, vocab, (reqs, new)).tolist()
        self.ids = torch.randint(0, vocab, (bs,), device=runner.device)
        self.last_prefill = None
        self.decode_slots: list[torch.Tensor] = []

    def launch_decode(self, steps: int) -> None:
        fb = self.builder.decode(self.rows, [self.ctx] * self.bs, self.ids)
        out = self.runner.forward(fb)
        self.decode_slots.append(fb.out_cache_loc)
        for _ in range(steps - 1):
            fb = self.builder.decode_next(fb, out.next_token_ids)
            out = self.runner.forward(fb)
            self.decode_slots.append(fb.out_cache_loc)

    def launch_prefill(self) -> None:
        fb = self.builder.extend(self.prefill_rows, [0] * len(self.prefill_rows), self.prompts)
        self.runner.forward(fb)
        self.last_prefill = fb

    def cleanup(self) -> None:
        """After a synchronize: free the slots the last trial's prefill and decode steps took."""
        allocator = self.runner.token_to_kv_pool_allocator
        if self.last_prefill is not None:
            allocator.free(self.last_prefill.out_cache_loc)
            self.last_prefill = None
        for slots in self.decode_slots:
            allocator.free(slots)
        self.decode_slots = []

    def release(self) -> None:
        """Give the case's request rows and context slots back (the next case needs them)."""
        self.cleanup()
        release(self.runner, self.rows, [self.ctx] * self.bs)
        self.runner.req_to_token_pool.free(list(self.prefill_rows))


def timed(fn: Callable[[], None]) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - t0)


def run_pair(case: Case, steps: int, decode_stream: torch.cuda.Stream, prefill_stream: torch.cuda.Stream,
             carveout: Optional[int], decode_first: bool = False) -> tuple[float, float, float, float]:
    """Wall ms until both are done, ms until the decode steps are done, ms until the prefill is done, host ms
    until both were launched."""
    start = torch.cuda.Event(enable_timing=True)
    d_end, p_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record(prefill_stream)
    decode_stream.wait_event(start)

    def prefill() -> None:
        with torch.cuda.stream(prefill_stream):
            if carveout is not None:
                torch._C._set_sm_carveout_experimental(carveout)
            try:
                case.launch_prefill()
            finally:
                if carveout is not None:
                    torch._C._set_sm_carveout_experimental(None)
            p_end.record(prefill_stream)

    def decode() -> None:
        with torch.cuda.stream(decode_stream):
            case.launch_decode(steps)
            d_end.record(decode_stream)

    for launch in ((decode, prefill) if decode_first else (prefill, decode)):
        launch()
    launched = 1e3 * (time.perf_counter() - t0)
    torch.cuda.synchronize()
    wall = 1e3 * (time.perf_counter() - t0)
    out = wall, start.elapsed_time(d_end), start.elapsed_time(p_end), launched
    case.cleanup()
    return out


def median_of(fn: Callable[[], tuple[float, ...]], reps: int) -> tuple[float, ...]:
    results = [fn() for _ in range(reps)]
    return tuple(statistics.median(r[i] for r in results) for i in range(len(results[0])))


GREEN_CONTEXTS: list = []  # a green context is destroyed with its Python object: keep them alive


def green_stream(num_sms: int) -> Optional[torch.cuda.Stream]:
    try:
        from torch.cuda.green_contexts import GreenContext
        ctx = GreenContext.create(num_sms=num_sms, device_id=torch.cuda.current_device())
        GREEN_CONTEXTS.append(ctx)
        if hasattr(ctx, "Stream"):
            return ctx.Stream()
        ctx.set_context()
        try:
            return torch.cuda.Stream()
        finally:
            ctx.pop_context()
    except Exception as e:  # noqa: BLE001 - reported, the variant is skipped
        print(f"green context of {num_sms} SMs: unavailable ({type(e).__name__}: {e})")
        return None


Variant = tuple[str, torch.cuda.Stream, torch.cuda.Stream, Optional[int], bool]  # name, decode / prefill
# stream, SMs the prefill's matmuls leave free, decode launched first


def warm_and_probe_syncs(case: Case, main: torch.cuda.Stream) -> float:
    """Warm both paths (first-use compiles), then launch one prefill under the sync debugger (a host sync in
    its launch would serialise it with the decode); returns its host launch ms."""
    with torch.cuda.stream(main):
        case.launch_prefill()
        case.launch_decode(3)
        torch.cuda.synchronize()
        case.cleanup()
        t0 = time.perf_counter()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            case.launch_prefill()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        host_ms = 1e3 * (time.perf_counter() - t0)
        torch.cuda.synchronize()
    case.cleanup()
    return host_ms


def alone_ms(case: Case, main: torch.cuda.Stream, reps: int) -> tuple[float, float]:
    """Median ms of the prefill alone and of one decode step alone (10 back to back)."""
    def prefill() -> tuple[float]:
        with torch.cuda.stream(main):
            ms = timed(case.launch_prefill)
        case.cleanup()
        return (ms,)

    def step() -> tuple[float]:
        with torch.cuda.stream(main):
            ms = timed(lambda: case.launch_decode(10)) / 10
        case.cleanup()
        return (ms,)

    return median_of(prefill, reps)[0], median_of(step, reps)[0]


def make_variants(main: torch.cuda.Stream, carveouts: list[int], green: list[int]) -> list[Variant]:
    lo, lo2, hi = torch.cuda.Stream(priority=0), torch.cuda.Stream(priority=0), torch.cuda.Stream(priority=-100)
    variants: list[Variant] = [
        ("one stream, prefill first", main, main, None, False),
        ("two streams, same priority", lo, lo2, None, False),
        ("two streams, prefill high", lo, hi, None, False),
        ("two streams, decode high", hi, lo, None, False),
        ("decode launched first, same priority", lo, lo2, None, True),
        ("decode launched first, prefill high", lo, hi, None, True),
    ]
    variants += [(f"decode first + high, prefill matmuls carve out {k} SMs", hi, lo, k, True) for k in carveouts]
    for k in green:
        stream = green_stream(k)
        if stream is not None:
            variants.append((f"decode first + high, prefill on a {k}-SM green context", hi, stream, None, True))
    return variants


def run_case(runner: ModelRunner, bs: int, ctx: int, reqs: int, new: int, carveouts: list[int],
             green: list[int], reps: int) -> None:
    case = Case(runner, bs, ctx, reqs, new)
    main = torch.cuda.Stream()
    host_ms = warm_and_probe_syncs(case, main)
    print(f"prefill {reqs} x {new}: host launch {host_ms:.1f} ms (sync-debug warnings above, if any)")
    t_p, t_d = alone_ms(case, main, reps)
    steps = max(1, round(t_p / t_d))
    serial = t_p + steps * t_d
    print(f"\n## decode {bs} x {ctx} beside prefill {reqs} x {new}: prefill alone {t_p:.1f} ms "
          f"({reqs * new / t_p * 1e3:.0f} tok/s), decode step alone {t_d:.2f} ms, N = {steps}, serial {serial:.1f} ms")
    print("| variant | wall ms | decode done ms | prefill done ms | host launch ms | gain vs serial |")
    print("|---|---|---|---|---|---|")
    print(f"| serial (sum of the two alone) | {serial:.1f} | - | - | - | - |")
    for name, d_stream, p_stream, carve, first in make_variants(main, carveouts, green):
        try:
            wall, d_done, p_done, host = median_of(
                lambda: run_pair(case, steps, d_stream, p_stream, carve, first), reps)
        except Exception as e:  # noqa: BLE001 - reported, the next variant runs
            print(f"| {name} | failed: {type(e).__name__}: {str(e)[:80]} | | | | |")
            continue
        print(f"| {name} | {wall:.1f} | {d_done:.1f} | {p_done:.1f} | {host:.1f} | {serial / wall:.3f}x |",
              flush=True)
    case.release()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--load-format", default="dummy")
    parser.add_argument("--cases", default="176x2600x2x2600,8x2300x1x2048",
                        help="comma-separated BSxCTXxREQSxNEW: decode BS x CTX beside a prefill of REQS x NEW")
    parser.add_argument("--carveouts", default="32,66", help="SMs the prefill's matmuls leave free")
    parser.add_argument("--green", default="66,100", help="SMs of a green context for the prefill")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--cuda-graph-max-bs", type=int, default=192)
    args = parser.parse_args()
    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",") if c]
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    need = sum(b * (c + 64) + r * n for b, c, r, n in cases) + 65536  # every trial frees what it took
    server_args = ServerArgs(model_path=args.model_path, load_format=args.load_format, dtype="bfloat16",
                             device="cuda", max_total_tokens=need,
                             max_running_requests=max(b + r for b, _, r, _ in cases) + 8,
                             cuda_graph_max_bs=args.cuda_graph_max_bs).resolved()
    runner = ModelRunner(server_args)
    print(f"device {torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs, "
          f"torch {torch.__version__}, backend {server_args.attention_backend}, graphs up to bs "
          f"{args.cuda_graph_max_bs}")
    for bs, ctx, reqs, new in cases:
        run_case(runner, bs, ctx, reqs, new, ints(args.carveouts), ints(args.green), args.reps)


if __name__ == "__main__":
    main()
