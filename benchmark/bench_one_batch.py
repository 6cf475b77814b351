"""Static-batch latency: one prefill, then decode steps, at several batch sizes (SGLang's bench_one_batch).

    python benchmark/bench_one_batch.py --batch-size 1 8 32 --input-len 128 --output-len 32
    python benchmark/bench_one_batch.py --model-path .models/llama-3.1-8b --load-format dummy --device cuda

Prints one table (prefill latency, median decode step, throughput) with the model, shapes,
device and commit; `--compare-hf` adds transformers `generate` on the same shapes.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from radixlm.model_executor.forward_batch_builder import ForwardBatchBuilder
from radixlm.model_executor.model_runner import ModelRunner
from radixlm.provenance import git_commit
from radixlm.server_args import ServerArgs


@dataclass
class Row:
    engine: str
    batch_size: int
    prefill_ms: float
    decode_ms: float  # median per step, each step synchronised (its host work cannot hide)
    total_s: float
    input_len: int
    output_len: int
    decode_overlap_ms: float = float("nan")  # mean per step with the host building step N+1 while N runs

    def cells(self) -> list[str]:
        prefill_tps = self.batch_size * self.input_len / (self.prefill_ms / 1e3)
        decode_tps = self.batch_size / (self.decode_ms / 1e3) if self.decode_ms else float("nan")
        total_tps = self.batch_size * (self.input_len + self.output_len) / self.total_s
        return [self.engine, str(self.batch_size), f"{self.prefill_ms:.1f}", f"{prefill_tps:.0f}",
                f"{self.decode_ms:.2f}", f"{self.decode_overlap_ms:.2f}", f"{decode_tps:.1f}", f"{total_tps:.1f}"]


HEADER = ["engine", "batch", "prefill ms", "prefill tok/s", "decode step ms (median, synced)",
          "decode step ms (overlapped)", "decode tok/s", "overall tok/s"]


def timer(device: torch.device) -> Callable[[], float]:
    def now() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()
    return now


def run_radixlm(runner: ModelRunner, bs: int, input_len: int, output_len: int, seed: int = 0) -> Row:
    now = timer(runner.device)
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, runner.model_config.vocab_size, (bs, input_len), generator=g).tolist()
    builder = ForwardBatchBuilder.for_runner(runner)
    rows = runner.req_to_token_pool.alloc(bs)
    start = now()
    fb = builder.extend(rows, [0] * bs, prompts)
    out = runner.forward(fb)
    prefill_end = now()
    steps = []
    for _ in range(output_len - 1):  # each step as the scheduler's steady decode builds it, then synced
        t0 = now()
        fb = builder.decode_next(fb, out.next_token_ids)
        out = runner.forward(fb)
        steps.append(now() - t0)
    end = now()
    builder.release(rows, fb.seq_lens_cpu)
    return Row("radixlm", bs, (prefill_end - start) * 1e3, statistics.median(steps) * 1e3 if steps else 0.0,
               end - start, input_len, output_len, overlapped_step_ms(runner, builder, prompts, output_len))


def overlapped_step_ms(runner: ModelRunner, builder: ForwardBatchBuilder, prompts: list[list[int]],
                       output_len: int) -> float:
    """The same decode again without a sync per step, as the scheduler's overlap loop runs it: each step is
    built from the last one's device tensors while the device still runs it. Mean ms per step."""
    now = timer(runner.device)
    rows = runner.req_to_token_pool.alloc(len(prompts))
    fb = builder.extend(rows, [0] * len(prompts), prompts)
    out = runner.forward(fb)
    steps = output_len - 1
    t0 = now()
    for _ in range(steps):
        fb = builder.decode_next(fb, out.next_token_ids)
        out = runner.forward(fb)
    elapsed = now() - t0
    builder.release(rows, fb.seq_lens_cpu)
    return elapsed / steps * 1e3 if steps > 0 else float("nan")


def run_hf(model: torch.nn.Module, vocab: int, device: torch.device, bs: int, input_len: int,
           output_len: int, seed: int = 0) -> Row:
    now = timer(device)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (bs, input_len), generator=g).to(device)
    mask = torch.ones_like(ids)

    def generate(n: int) -> float:
        t0 = now()
        model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n, min_new_tokens=n,
                       eos_token_id=None, pad_token_id=0)
        return now() - t0

    with torch.inference_mode():
        prefill = generate(1)  # prefill + first token, as radixlm's prefill row measures
        total = generate(output_len)
    decode = (total - prefill) / max(1, output_len - 1)
    return Row("hf generate", bs, prefill * 1e3, decode * 1e3, total, input_len, output_len)


def load_hf(runner: ModelRunner, load_format: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    cfg = runner.model_config
    if load_format == "dummy":
        with torch.device(runner.device):
            model = AutoModelForCausalLM.from_config(cfg.hf_config, dtype=cfg.dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(cfg.model_dir, dtype=cfg.dtype).to(runner.device)
    return model.eval()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads)"


def print_table(rows: list[Row], args: argparse.Namespace, runner: ModelRunner) -> None:
    cfg = runner.model_config
    print(f"\nmodel: {cfg.architecture} {cfg.model_dir} (load_format={args.load_format}, dtype={cfg.dtype})")
    print(f"shapes: input_len={args.input_len} output_len={args.output_len} batch sizes={args.batch_size}; "
          f"attention={runner.server_args.attention_backend}")
    print(f"device: {device_name(runner.device)} x tp_size={runner.tp_size}; torch {torch.__version__}; "
          f"commit {git_commit(__file__)}\n")
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-path", default=None, help="model folder or .gguf (default: embedded SmolLM2)")
    parser.add_argument("--load-format", default="auto", choices=["auto", "safetensors", "gguf", "dummy"])
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--attention-backend", default=None, choices=["torch_native", "triton", "flashinfer"])
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--compare-hf", action="store_true", help="also time transformers generate")
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--disable-cuda-graph", action="store_true", help="eager decode (CUDA)")
    parser.add_argument("--tp-size", type=int, default=1, help="tensor-parallel ranks, one process per GPU")
    args = parser.parse_args()

    max_bs = max(args.batch_size)
    tokens = max_bs * (args.input_len + args.output_len) + 64
    server_args = ServerArgs(model_path=args.model_path, load_format=args.load_format, dtype=args.dtype,
                             device=args.device, attention_backend=args.attention_backend,
                             max_total_tokens=tokens, max_running_requests=max_bs,
                             mem_fraction_static=args.mem_fraction_static,
                             disable_cuda_graph=args.disable_cuda_graph).resolved()
    if args.tp_size == 1:
        run_rank(0, args, server_args)
        return
    import dataclasses
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{s.getsockname()[1]}"
    server_args = dataclasses.replace(server_args, tp_size=args.tp_size, dist_init_addr=addr)
    mp.spawn(run_rank, args=(args, server_args), nprocs=args.tp_size, join=True)


def run_rank(rank: int, args: argparse.Namespace, server_args: ServerArgs) -> None:
    """One tensor-parallel rank (GPU `rank`); every rank runs the same batches, rank 0 prints."""
    runner = ModelRunner(server_args, tp_rank=rank, tp_size=server_args.tp_size, gpu_id=rank)
    run_radixlm(runner, 1, min(16, args.input_len), 4)  # warm-up: allocator paths, kernels, thread pools
    rows = []
    for bs in args.batch_size:
        rows.append(run_radixlm(runner, bs, args.input_len, args.output_len))
        if rank == 0:
            print(f"radixlm bs={bs}: {rows[-1].cells()}", flush=True)
    if rank > 0:
        return
    if args.compare_hf:
        hf = load_hf(runner, args.load_format)
        run_hf(hf, runner.model_config.vocab_size, runner.device, 1, min(16, args.input_len), 4)
        for bs in args.batch_size:
            rows.append(run_hf(hf, runner.model_config.vocab_size, runner.device, bs, args.input_len,
                               args.output_len))
            print(f"hf bs={bs}: {rows[-1].cells()}", flush=True)
    print_table(rows, args, runner)


if __name__ == "__main__":
    main()
