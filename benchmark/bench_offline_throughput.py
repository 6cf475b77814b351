"""Offline throughput of radixlm.Engine, side by side with Hugging Face `generate` in the same run.

Workloads (greedy, ignore_eos, so every request produces exactly its output length):
  a: 64 prompts of 200-600 tokens, 128 output tokens each
  b: 64 questions (20-60 tokens) behind one shared 1,000-token system prompt, 32 output tokens
  dataset: any `--dataset` of benchmark/datasets.py, e.g. SGLang's CI workload:
     --dataset random --num-prompts 1000 --random-input-len 1024 --random-output-len 1024
     --random-range-ratio 0.5 --load-format dummy --model-path <config folder> --skip-hf
HF runs the same token ids batched and left-padded (`--hf-batch-size`). Prompts are token ids
drawn from the vocabulary (seeded), so both engines see identical inputs.

    python benchmark/bench_offline_throughput.py                # a and b on the embedded SmolLM2
    python benchmark/bench_offline_throughput.py --workload b --num-prompts 32
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _REPO_ROOT / "benchmark"]

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from radixlm.provenance import git_commit  # noqa: E402
from radixlm.server_args import ServerArgs  # noqa: E402


@dataclass
class Workload:
    name: str
    prompts: list[list[int]]
    output_lens: list[int]


@dataclass
class Result:
    engine: str
    workload: str
    seconds: float
    num_requests: int
    input_tokens: int
    output_tokens: int
    cache_hit_rate: float | None

    def row(self) -> list[str]:
        hit = "-" if self.cache_hit_rate is None else f"{self.cache_hit_rate:.1%}"
        return [self.workload, self.engine, f"{self.num_requests}", f"{self.seconds:.1f}",
                f"{self.num_requests / self.seconds:.2f}", f"{self.input_tokens / self.seconds:.0f}",
                f"{self.output_tokens / self.seconds:.1f}", hit]


def _ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(100, vocab - 100) for _ in range(n)]


def workload_a(num: int, vocab: int, seed: int) -> Workload:
    rng = random.Random(seed)
    return Workload("a: 200-600 in, 128 out", [_ids(rng, rng.randint(200, 600), vocab) for _ in range(num)],
                    [128] * num)


def workload_b(num: int, vocab: int, seed: int, output_len: int = 32) -> Workload:
    rng = random.Random(seed + 1)
    system = _ids(rng, 1000, vocab)
    return Workload(f"b: 1000 shared + 20-60 in, {output_len} out",
                    [system + _ids(rng, rng.randint(20, 60), vocab) for _ in range(num)], [output_len] * num)


def workload_dataset(args: argparse.Namespace, tokenizer: object) -> Workload:
    from radixlm.benchmark.datasets import DatasetConfig, get_dataset

    fields = {f.name for f in dataclasses.fields(DatasetConfig)}
    config = DatasetConfig(**{k: v for k, v in vars(args).items() if k in fields})
    rows = get_dataset(config, tokenizer)
    return Workload(f"{config.dataset_name} x{len(rows)}", [r.prompt_ids for r in rows], [r.output_len for r in rows])


def greedy(max_new_tokens: int) -> dict:
    """Sampling params of every benchmarked request: greedy, exactly `max_new_tokens` tokens."""
    return {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}


def warm_up(engine: object, work: Workload, num_requests: int, max_new_tokens: int = 4) -> None:
    """The workload's first requests with a few output tokens, untimed: on a fresh GPU the kernels that
    only this workload's batches use (a prefill over a cached prefix, the shared-prefix decode grouping of
    16 or more requests) compile here, not in the timed run. `run_engine` then flushes the cache."""
    if num_requests <= 0:
        return
    params = [greedy(min(n, max_new_tokens)) for n in work.output_lens[:num_requests]]
    engine.generate(input_ids=work.prompts[:num_requests], sampling_params=params)


def stats_since(before: dict, after: dict) -> dict:
    """The scheduler's counters (`SchedulerStats`) over one timed run: the cumulative ones subtracted,
    the maxima as they stand after it (a warm-up's batches are smaller than the run's)."""
    from radixlm.managers.scheduler_stats import SchedulerStats

    counters = {f.name for f in dataclasses.fields(SchedulerStats) if not f.name.startswith(("_", "max_"))}
    return {k: after[k] - before[k] if k in counters and k in before else v for k, v in after.items()}


def run_engine(engine: object, work: Workload) -> Result:
    assert engine.flush_cache()
    params = [greedy(n) for n in work.output_lens]
    start = time.perf_counter()
    outs = engine.generate(input_ids=work.prompts, sampling_params=params)
    seconds = time.perf_counter() - start
    cached = sum(o["meta_info"]["cached_tokens"] for o in outs)
    inputs = sum(len(p) for p in work.prompts)
    return Result("radixlm", work.name, seconds, len(outs), inputs,
                  sum(o["meta_info"]["completion_tokens"] for o in outs), cached / inputs)


def run_hf(model: object, work: Workload, batch_size: int, pad_id: int) -> Result:
    import torch

    start = time.perf_counter()
    out_tokens = 0
    with torch.inference_mode():
        for i in range(0, len(work.prompts), batch_size):
            batch = work.prompts[i:i + batch_size]
            width = max(len(p) for p in batch)
            ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch], device=model.device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=model.device)
            max_new = max(work.output_lens[i:i + batch_size])
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                                 eos_token_id=None, pad_token_id=pad_id)
            out_tokens += (gen.shape[1] - width) * len(batch)
    seconds = time.perf_counter() - start
    return Result("HF generate", work.name, seconds, len(work.prompts), sum(len(p) for p in work.prompts),
                  out_tokens, None)


def print_step_profile(st: dict) -> None:
    """Where the scheduler's wall time went in one timed run (`stats_since`)."""
    dec, pre = st.get("decode_steps", 0), st.get("prefill_steps", 0)
    if not dec and not pre:
        return
    print(f"step profile: decode {st['decode_wall_s']:.1f} s in {dec} steps "
          f"({1e3 * st['decode_wall_s'] / max(1, dec):.2f} ms/step, mean batch "
          f"{st['decode_batch_size_sum'] / max(1, dec):.1f}, max {st['max_decode_batch_size']}); "
          f"prefill {st['prefill_wall_s']:.1f} s in {pre} batches ({st['prefill_new_tokens']} tokens, "
          f"{st['prefill_new_tokens'] / max(1e-9, st['prefill_wall_s']):.0f} tok/s); "
          f"retractions {st.get('num_retractions', 0)}; prefills beside decode {st.get('prefills_beside_decode', 0)} "
          f"(decodes lagged for releases {st.get('lagged_for_frees', 0)})", flush=True)
    mem = st.get("memory") or {}
    if mem.get("peak_reserved_gib") is not None:
        print(f"memory: {mem['device_total_gib']:.1f} GiB device, mem_fraction_static {mem['mem_fraction_static']}; "
              f"weights {mem['weights_gib']:.2f}, KV pool {mem['kv_cache_gib']:.2f} ({st['max_total_num_tokens']} "
              f"tokens), request table {mem['req_to_token_gib']:.2f}; allocator peak {mem['peak_reserved_gib']:.2f} "
              f"GiB, of which other (activations, graphs, sampling) {mem['peak_other_gib']:.2f}; free on the device "
              f"{mem['device_free_gib']:.2f}", flush=True)


def print_table(results: list[Result], args: argparse.Namespace, server_args: ServerArgs) -> None:
    commit = git_commit(__file__)
    import torch

    print(f"\nmodel={server_args.model_path or 'SmolLM2-135M-Instruct (embedded)'} load_format="
          f"{server_args.load_format} device={server_args.device} threads={torch.get_num_threads()} "
          f"cpu={platform.processor() or platform.machine()} commit={commit}")
    head = ["workload", "engine", "reqs", "time s", "req/s", "input tok/s", "output tok/s", "cache hit"]
    rows = [head] + [r.row() for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for k, row in enumerate(rows):
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)))
        if k == 0:
            print("-|-".join("-" * w for w in widths))
    by_work: dict[str, dict[str, Result]] = {}
    for r in results:
        by_work.setdefault(r.workload, {})[r.engine] = r
    for name, pair in by_work.items():
        if len(pair) == 2:
            ours, hf = pair["radixlm"], pair["HF generate"]
            speedup = (ours.output_tokens / ours.seconds) / (hf.output_tokens / hf.seconds)
            print(f"{name}: radixlm / HF output tok/s = {speedup:.2f}x")


def main() -> None:
    from radixlm.benchmark.datasets import add_dataset_args

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=["ab", "a", "b", "dataset"], default=None,
                        help="default: dataset when --dataset is given, else ab")
    parser.add_argument("--skip-hf", action="store_true", help="do not run the HF generate baseline")
    parser.add_argument("--hf-batch-size", type=int, default=64)
    parser.add_argument("--shared-output-len", type=int, default=32, help="output tokens per request in b")
    parser.add_argument("--warmup-requests", type=int, default=16,
                        help="untimed warm-up before each workload: its first N requests, 4 output tokens each "
                             "(0: none)")
    add_dataset_args(parser)
    ServerArgs.add_cli_args(parser)
    parser.set_defaults(num_prompts=None, log_level="warning")
    args = parser.parse_args()
    if args.warmup_requests < 0:
        parser.error(f"--warmup-requests must be >= 0, got {args.warmup_requests}")
    workload = args.workload or ("dataset" if any(a.startswith("--dataset") for a in sys.argv[1:]) else "ab")
    server_args = ServerArgs.from_cli_args(args).resolved()

    import radixlm
    from radixlm.model_loader.model_config import ModelConfig
    from radixlm.model_loader.tokenizer import get_tokenizer

    vocab = ModelConfig.from_server_args(server_args).vocab_size
    works: list[Workload] = []
    if workload in ("ab", "a"):
        works.append(workload_a(args.num_prompts or 64, vocab, args.seed))
    if workload in ("ab", "b"):
        works.append(workload_b(args.num_prompts or 64, vocab, args.seed, args.shared_output_len))
    if workload == "dataset":
        if args.num_prompts is None:
            args.num_prompts = 100
        works.append(workload_dataset(args, get_tokenizer(server_args.tokenizer_path or server_args.model_path)))

    results: list[Result] = []
    with radixlm.Engine(**{k: v for k, v in dataclasses.asdict(server_args).items() if k != "model_path"},
                        model_path=server_args.model_path) as engine:
        for work in works:
            warm_up(engine, work, args.warmup_requests)
            before = engine.get_server_info()
            results.append(run_engine(engine, work))
            print(results[-1].row(), flush=True)
            print_step_profile(stats_since(before, engine.get_server_info()))
    if not args.skip_hf and server_args.load_format != "dummy":
        import torch
        from transformers import AutoModelForCausalLM

        from radixlm.model_loader.resolve import resolve_model_dir

        model = AutoModelForCausalLM.from_pretrained(resolve_model_dir(server_args.model_path),
                                                     torch_dtype=torch.float32).eval().to(server_args.device)
        for work in works:
            results.append(run_hf(model, work, args.hf_batch_size, pad_id=0))
            print(results[-1].row(), flush=True)
    print_table(results, args, server_args)


if __name__ == "__main__":
    main()
