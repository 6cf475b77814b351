"""Scheduler CPU overhead per decode iteration, outside the model forward (issue 4).

The real `Scheduler` (batch planner, prefix cache, KV pools, output processing, the real
SmolLM2 tokenizer and config) runs its plain loop step by step, but the ModelRunner is a
STAND-IN: its forward sleeps a fixed latency and returns constant token ids, and the
sockets are a stand-in that pickles each outgoing message (the cost of a ZMQ send) and
receives nothing. One thread (`torch.set_num_threads(1)`). Per decode iteration we report
the wall time minus the stand-in forward, and the thread's CPU time (sleep excluded).

    python benchmark/bench_scheduler_overhead.py                 # 1, 64, 256 running requests
    python benchmark/bench_scheduler_overhead.py --stream        # also streaming requests
    python benchmark/bench_scheduler_overhead.py --repeat 3      # each point 3 times, the median run
    python benchmark/bench_scheduler_overhead.py --profile 256   # cProfile of the 256 case

On a shared machine, pin it to one core (`taskset -c 0`) and use `--repeat`: a step after the
5 ms sleep starts with cold caches, so neighbours' load moves the figures by tens of percent.
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _REPO_ROOT / "benchmark"]

import argparse  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

from radixlm.managers.io_struct import TokenizedGenerateReqInput  # noqa: E402
from radixlm.provenance import git_commit  # noqa: E402
from radixlm.sampling.sampling_params import SamplingParams  # noqa: E402
from radixlm.server_args import ServerArgs  # noqa: E402

from radixlm.benchmark.stand_in import SilentIO, StandInModelRunner, stand_ins  # noqa: E402

PROMPT_LEN = 64
MAX_NEW = 1000  # no request finishes during the measurement (iters < MAX_NEW - warm-up)


class StandInIO(SilentIO):
    """No sockets: nothing arrives; outgoing messages are pickled (what send_pyobj costs) and dropped."""

    def __init__(self, port_args: Any, tp_rank: int) -> None:
        self.sent_bytes = 0

    def send_to_detokenizer(self, msg: Any) -> None:
        self.sent_bytes += len(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))


def make_scheduler(num_reqs: int) -> Any:
    from radixlm.managers.scheduler import Scheduler

    args = ServerArgs(max_total_tokens=num_reqs * (PROMPT_LEN + MAX_NEW) + 1024, max_running_requests=num_reqs,
                      context_length=PROMPT_LEN + MAX_NEW + 8,
                      disable_overlap_schedule=True, log_level="warning").resolved()
    with stand_ins(StandInIO):
        return Scheduler(args, port_args=None)


def fill_running(scheduler: Any, num_reqs: int, stream: bool) -> None:
    params = SamplingParams(max_new_tokens=MAX_NEW, temperature=0, ignore_eos=True).normalize()
    for i in range(num_reqs):
        ids = [(i * 7919 + j * 104729) % 40000 + 100 for j in range(PROMPT_LEN)]
        scheduler.handle_generate_request(TokenizedGenerateReqInput(rid=f"r{i}", input_ids=ids,
                                                                    sampling_params=params, stream=stream))
    while scheduler.waiting_queue or len(scheduler.running) < num_reqs:
        step(scheduler)


def step(scheduler: Any) -> float:
    """One plain-loop iteration; returns the stand-in forward's wall time."""
    batch = scheduler.get_next_batch_to_run()
    result = scheduler.run_batch(batch)
    scheduler.process_batch_result(batch, result)
    return result.forward_time_s


def measure(num_reqs: int, iters: int, stream: bool) -> dict:
    scheduler = make_scheduler(num_reqs)
    fill_running(scheduler, num_reqs, stream)
    for _ in range(5):  # warm up
        step(scheduler)
    wall_outside, cpu = [], []
    for _ in range(iters):
        t0, c0 = time.perf_counter(), time.thread_time()
        forward_s = step(scheduler)
        wall_outside.append(time.perf_counter() - t0 - forward_s)
        cpu.append(time.thread_time() - c0)
    assert len(scheduler.running) == num_reqs
    wall_outside.sort()
    cpu.sort()
    return {"reqs": num_reqs, "stream": stream, "iters": iters, "mean_ms": 1e3 * sum(wall_outside) / iters,
            "p50_ms": 1e3 * wall_outside[iters // 2], "p90_ms": 1e3 * wall_outside[int(iters * 0.9)],
            "cpu_ms": 1e3 * sum(cpu) / iters}


def measure_median(num_reqs: int, iters: int, stream: bool, repeat: int) -> dict:
    """`repeat` fresh measurements of one point; the one with the median mean."""
    runs = sorted((measure(num_reqs, iters, stream) for _ in range(repeat)), key=lambda r: r["mean_ms"])
    return {**runs[len(runs) // 2], "runs": repeat}


def print_table(rows: list[dict], latency_s: float) -> None:
    commit = git_commit(__file__)
    print(f"\nScheduler overhead per decode iteration (plain loop), forward = STAND-IN sleeping "
          f"{latency_s * 1e3:.1f} ms; prompts {PROMPT_LEN} tokens; torch threads={torch.get_num_threads()}; "
          f"cpu={platform.processor() or platform.machine()}; load avg={os.getloadavg()[0]:.2f}; commit={commit}")
    head = ["running reqs", "stream", "iters", "runs (median)", "mean ms (wall - forward)", "p50 ms", "p90 ms",
            "thread CPU ms"]
    print(" | ".join(head))
    print("-|-".join("-" * len(h) for h in head))
    for r in rows:
        cells = [r["reqs"], "yes" if r["stream"] else "no", r["iters"], r["runs"], f"{r['mean_ms']:.3f}",
                 f"{r['p50_ms']:.3f}", f"{r['p90_ms']:.3f}", f"{r['cpu_ms']:.3f}"]
        print(" | ".join(str(c).ljust(len(h)) for c, h in zip(cells, head)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reqs", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--forward-latency-ms", type=float, default=5.0)
    parser.add_argument("--stream", action="store_true",
                        help="also measure streaming requests (one detokenizer message per token per request)")
    parser.add_argument("--profile", type=int, default=None, help="cProfile the decode loop at this many requests")
    parser.add_argument("--repeat", type=int, default=1, help="measure each point this many times; report the median")
    args = parser.parse_args()
    torch.set_num_threads(1)
    StandInModelRunner.latency_s = args.forward_latency_ms / 1e3  # the stand-in forward sleeps this long
    if args.profile:
        import cProfile
        import pstats

        scheduler = make_scheduler(args.profile)
        fill_running(scheduler, args.profile, args.stream)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.iters):
            step(scheduler)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return
    modes = [False, True] if args.stream else [False]
    print_table([measure_median(n, args.iters, stream, args.repeat) for stream in modes for n in args.reqs],
                StandInModelRunner.latency_s)


if __name__ == "__main__":
    main()
