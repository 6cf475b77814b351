"""How the KV pool's size shapes an offline run's batches: the real scheduler, a stand-in model.

The real `Scheduler` (batch planner, admission with its new-token ratio, chunked prefill, radix
cache, retraction) runs its plain loop over a benchmark workload, once per `--max-total-tokens`;
the model runner is a STAND-IN that allocates nothing on a device and returns a constant token
(every request is greedy with `ignore_eos`, so each produces exactly its output length). It
counts what a GPU run's step profile reports (decode steps, mean and max decode batch, prefill
batches, retractions), with no GPU: enough to see what a larger pool (a higher
`--mem-fraction-static`, or fp8 K/V at twice the tokens) changes in the number of decode steps.

    python benchmark/sim_kv_capacity.py --model-path .models/llama-3.1-8b --dataset random \\
        --num-prompts 500 --random-input-len 4096 --random-output-len 2048 --random-range-ratio 0 \\
        --max-total-tokens 879811 947000 1759622

The GPU run uses the overlap loop, which frees a finished request's slots one step later than this
plain loop, so its counts can differ slightly; the table says how far at the measured capacities.
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _REPO_ROOT / "benchmark"]

import argparse  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

from radixlm.provenance import git_commit  # noqa: E402
from radixlm.server_args import ServerArgs  # noqa: E402

from radixlm.benchmark.stand_in import stand_ins  # noqa: E402

# the CUDA defaults this simulates (`ServerArgs.resolved` on a GPU, `ModelRunner.init_memory_pool`)
CUDA_CHUNKED_PREFILL = 8192
CUDA_MAX_RUNNING_CAP = 2048


@dataclass(frozen=True)
class SimResult:
    capacity: int
    max_running: int
    decode_steps: int
    decode_rows: int  # the decode batches' sizes summed: one token each
    max_batch: int
    prefill_batches: int
    retractions: int
    output_tokens: int
    seconds: float

    @property
    def mean_batch(self) -> float:
        return self.decode_rows / max(1, self.decode_steps)


def make_scheduler(model_path: str, capacity: int, policy: str, context_length: int) -> Any:
    from radixlm.managers.scheduler import Scheduler

    args = ServerArgs(model_path=model_path, device="cpu", max_total_tokens=capacity, context_length=context_length,
                      max_running_requests=min(CUDA_MAX_RUNNING_CAP, capacity),
                      chunked_prefill_size=CUDA_CHUNKED_PREFILL, schedule_policy=policy,
                      disable_overlap_schedule=True, log_level="warning").resolved()
    with stand_ins():
        return Scheduler(args, port_args=None)


def simulate(model_path: str, prompts: list[list[int]], output_lens: list[int], capacity: int,
             policy: str = "fcfs") -> SimResult:
    from radixlm.managers.io_struct import TokenizedGenerateReqInput
    from radixlm.sampling.sampling_params import SamplingParams

    longest = max(len(p) + n for p, n in zip(prompts, output_lens))
    scheduler = make_scheduler(model_path, capacity, policy, longest)
    start = time.perf_counter()
    for i, (ids, n) in enumerate(zip(prompts, output_lens)):
        params = SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True).normalize()
        scheduler.handle_generate_request(TokenizedGenerateReqInput(rid=f"r{i}", input_ids=ids,
                                                                    sampling_params=params, stream=False))
    while scheduler.waiting_queue or scheduler.running:
        batch = scheduler.get_next_batch_to_run()
        if batch is None:
            raise RuntimeError(f"the scheduler stalled with {len(scheduler.waiting_queue)} waiting and "
                               f"{len(scheduler.running)} running requests at --max-total-tokens {capacity}")
        scheduler.process_batch_result(batch, scheduler.run_batch(batch))
    stats = scheduler.get_stats()
    if stats["memory_leak"]:
        raise RuntimeError(f"KV slots leaked: {stats['memory_leak_message']}")
    steps = stats["decode_steps"]
    return SimResult(capacity, scheduler.max_running_requests, steps, stats["decode_batch_size_sum"],
                     stats["max_decode_batch_size"], stats["prefill_steps"], stats.get("num_retractions", 0),
                     stats["generated_tokens"], time.perf_counter() - start)


def print_table(results: list[SimResult], workload: str) -> None:
    print(f"\n{workload}; real scheduler, stand-in model (plain loop); commit={git_commit(__file__)}")
    head = ["KV tokens", "max running", "decode steps", "mean batch", "max batch", "prefill batches",
            "retractions", "output tokens", "sim s"]
    print(" | ".join(head))
    print("-|-".join("-" * len(h) for h in head))
    for r in results:
        cells = [r.capacity, r.max_running, r.decode_steps, f"{r.mean_batch:.1f}", r.max_batch, r.prefill_batches,
                 r.retractions, r.output_tokens, f"{r.seconds:.1f}"]
        print(" | ".join(str(c).ljust(len(h)) for c, h in zip(cells, head)))


def main() -> None:
    from radixlm.benchmark.bench_offline_throughput import workload_dataset
    from radixlm.benchmark.datasets import add_dataset_args
    from radixlm.model_loader.tokenizer import get_tokenizer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-path", required=True, help="a model folder (config and tokenizer; no weights read)")
    parser.add_argument("--max-total-tokens", type=int, nargs="+", required=True, help="KV pool sizes to simulate")
    parser.add_argument("--schedule-policy", default="fcfs")
    add_dataset_args(parser)
    parser.set_defaults(num_prompts=100)
    args = parser.parse_args()
    bad = [c for c in args.max_total_tokens if c <= 0]
    if bad:
        parser.error(f"--max-total-tokens must be positive, got {bad}")
    work = workload_dataset(args, get_tokenizer(args.model_path))
    results = []
    for capacity in args.max_total_tokens:
        results.append(simulate(args.model_path, work.prompts, work.output_lens, capacity, args.schedule_policy))
        print(results[-1], flush=True)
    print_table(results, f"{work.name}: {sum(map(len, work.prompts))} input tokens, "
                         f"{sum(work.output_lens)} output tokens")


if __name__ == "__main__":
    main()
