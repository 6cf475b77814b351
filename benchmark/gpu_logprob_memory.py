"""Prompt logprobs of one long prompt on a runner sized like a server's: memory and time, sliced or not.

    python benchmark/gpu_logprob_memory.py --model-path .models/llama-3.1-8b --load-format dummy

The runner takes the default `--mem-fraction-static` (KV pool, request table and CUDA graphs as a
server has them), then prefills one prompt of `--prompt-len` tokens with every prompt token scored
(`logprob_start_len` 0, `--top-logprobs` alternatives). It runs twice: the logits processor's row
slices (`LOGPROB_SLICE_ELEMENTS`, the default) and one slice of every row (the code before the
slices), and prints for each the allocator's peak above what was allocated before the forward, the
time, and whether it ran out of memory; where both ran, the largest difference of their logprobs.
A 256-token prefill with logprobs runs first, untimed.
"""

from __future__ import annotations

import argparse
import time
from typing import Optional

import torch

import radixlm.layers.logits_processor as logits_module
from radixlm.model_executor.forward_batch_builder import ForwardBatchBuilder
from radixlm.model_executor.model_runner import ModelRunner
from radixlm.server_args import ServerArgs


def prefill_with_logprobs(runner: ModelRunner, prompt: list[int], top: int) -> tuple[dict, Optional[torch.Tensor]]:
    """One extend of `prompt` scoring every token; the peak and time, and the logprobs (None on OOM)."""
    builder = ForwardBatchBuilder.for_runner(runner)
    rows = runner.req_to_token_pool.alloc(1)
    batch = builder.extend(rows, [0], [prompt], return_logprob=True, top_logprobs_nums=[top], logprob_start_lens=[0])
    cuda = runner.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if cuda else 0
    start = time.perf_counter()
    try:
        out = runner.forward(batch)
        logprobs = out.input_token_logprobs.float().cpu()
        row = dict(oom=False)
    except torch.cuda.OutOfMemoryError as e:
        logprobs, row = None, dict(oom=True, error=str(e).splitlines()[0][:160])
    if cuda:
        torch.cuda.synchronize()
        row["peak_gib"] = (torch.cuda.max_memory_allocated() - before) / 2**30
    row["ms"] = 1e3 * (time.perf_counter() - start)
    builder.release(rows, [len(prompt)])
    return row, logprobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--load-format", default="dummy")
    ap.add_argument("--prompt-len", type=int, default=8000)
    ap.add_argument("--top-logprobs", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself")
    args = ap.parse_args()
    cpu = args.device == "cpu"
    server_args = ServerArgs(model_path=args.model_path, load_format=args.load_format, device=args.device,
                             dtype="float32" if cpu else "bfloat16",
                             max_total_tokens=args.prompt_len + 64 if cpu else None).resolved()
    runner = ModelRunner(server_args)
    report = runner.memory_report()
    print(f"device {torch.cuda.get_device_name() if not cpu else 'cpu'}, mem_fraction_static "
          f"{server_args.mem_fraction_static}, KV pool {runner.max_total_num_tokens} tokens, "
          f"free on the device {report.device_free_gib} GiB; prompt {args.prompt_len} tokens, "
          f"top {args.top_logprobs}")
    vocab = runner.model_config.vocab_size
    prompt = torch.randint(10, vocab - 10, (args.prompt_len,), generator=torch.Generator().manual_seed(0)).tolist()
    prefill_with_logprobs(runner, prompt[:256], args.top_logprobs)  # warm-up: the first forward's one-time costs
    sliced_elements = logits_module.LOGPROB_SLICE_ELEMENTS
    print("| logprob rows per slice | peak above the forward's start (GiB) | ms | out of memory |")
    print("|---|---|---|---|")
    results = {}
    for label, elements in (("sliced", sliced_elements), ("one slice", args.prompt_len * vocab)):
        logits_module.LOGPROB_SLICE_ELEMENTS = elements
        row, results[label] = prefill_with_logprobs(runner, prompt, args.top_logprobs)
        rows = f"{max(1, elements // vocab)} ({label})"
        peak = f"{row['peak_gib']:.2f}" if "peak_gib" in row else "-"
        print(f"| {rows} | {peak} | {row['ms']:.1f} | {row.get('error', 'no') if row['oom'] else 'no'} |", flush=True)
    logits_module.LOGPROB_SLICE_ELEMENTS = sliced_elements
    if results["sliced"] is not None and results["one slice"] is not None:
        diff = (results["sliced"] - results["one slice"]).abs().max().item()
        print(f"max |sliced - one slice| over {results['sliced'].numel()} prompt logprobs: {diff:.3g}")


if __name__ == "__main__":
    main()
