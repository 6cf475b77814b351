"""Per-step overhead of constrained decoding (xgrammar) against unconstrained sampling.

    python benchmark/bench_grammar.py [--batch-sizes 1 32] [--steps 60] [--device cpu|cuda]

One decode step of a constrained batch = fill the bitmask (CPU, matchers) + copy it to the
logits' device + apply it to the logits + sample + accept each sampled token. The baseline
is the same sampler call with no mask. Logits are random [bs, 49152] float32 (SmolLM2's
vocab); rows cycle through JSON-schema, any-JSON and regex grammars and are driven by the
sampled tokens (a terminated row restarts). Prints one table (median per step).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from radixlm.constrained import (
    ANY_JSON, GrammarBackend, GrammarObject, allocate_vocab_mask, apply_vocab_mask, bitmask_to_bool_mask,
    create_grammar_backend, fill_batch_mask,
)
from radixlm.model_loader.tokenizer import get_tokenizer
from radixlm.provenance import git_commit
from radixlm.sampling.sampler import Sampler
from radixlm.sampling.sampling_batch_info import SamplingBatchInfo

VOCAB = 49152
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}}}, "required": ["name", "age", "tags"]}
KEYS = [("json", json.dumps(SCHEMA)), ("json", ANY_JSON), ("regex", r"[0-9]{1,3}(\.[0-9]{1,3}){3}")]


@dataclass
class Timings:
    parts: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.parts.setdefault(name, []).append(seconds)

    def median_us(self, name: str) -> float:
        return statistics.median(self.parts[name]) * 1e6 if name in self.parts else 0.0


def timed(timings: Timings, name: str, fn: Callable[[], object], device: torch.device) -> object:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    timings.add(name, time.perf_counter() - t0)
    return out


def greedy_info(bs: int, device: torch.device, vocab_mask: torch.Tensor | None = None) -> SamplingBatchInfo:
    return SamplingBatchInfo(
        temperatures=torch.zeros(bs, 1, device=device), top_ps=torch.ones(bs, device=device),
        top_ks=torch.full((bs,), VOCAB, device=device), min_ps=torch.zeros(bs, device=device),
        seeds=torch.zeros(bs, dtype=torch.int64, device=device), steps=torch.zeros(bs, dtype=torch.int64, device=device),
        is_all_greedy=True, vocab_mask=vocab_mask)


def new_grammars(backend: GrammarBackend, bs: int) -> list[GrammarObject]:
    return [backend.poll_ready(KEYS[i % len(KEYS)]) for i in range(bs)]


def run_constrained(backend: GrammarBackend, bs: int, steps: int, device: torch.device, bool_mask: bool) -> Timings:
    timings, sampler = Timings(), Sampler()
    grammars = new_grammars(backend, bs)
    bitmask = allocate_vocab_mask(VOCAB, bs, device)
    gen = torch.Generator(device=device).manual_seed(0)
    for _ in range(steps):
        logits = torch.randn(bs, VOCAB, device=device, generator=gen)
        timed(timings, "fill", lambda: fill_batch_mask(grammars, bitmask), device)
        if bool_mask:  # the SamplingBatchInfo.vocab_mask path: unpack, then Sampler's masked_fill
            mask = timed(timings, "apply", lambda: bitmask_to_bool_mask(bitmask.to(device), VOCAB), device)
            tokens = timed(timings, "sample", lambda: sampler(logits, greedy_info(bs, device, mask)), device)
        else:
            timed(timings, "apply", lambda: apply_vocab_mask(logits, bitmask), device)
            tokens = timed(timings, "sample", lambda: sampler(logits, greedy_info(bs, device)), device)
        timed(timings, "accept", lambda: accept_all(grammars, tokens.tolist()), device)
        for i, g in enumerate(grammars):
            if g.is_terminated():
                grammars[i] = backend.poll_ready(KEYS[i % len(KEYS)])
    return timings


def accept_all(grammars: list[GrammarObject], tokens: list[int]) -> None:
    for grammar, token in zip(grammars, tokens):
        grammar.accept_token(token)


def run_unconstrained(bs: int, steps: int, device: torch.device) -> Timings:
    timings, sampler = Timings(), Sampler()
    gen = torch.Generator(device=device).manual_seed(0)
    for _ in range(steps):
        logits = torch.randn(bs, VOCAB, device=device, generator=gen)
        tokens = timed(timings, "sample", lambda: sampler(logits, greedy_info(bs, device)), device)
        timed(timings, "accept", lambda: tokens.tolist(), device)
    return timings


def print_table(rows: list[tuple[int, str, Timings]], baseline: dict[int, float]) -> None:
    cols = ("fill", "apply", "sample", "accept")
    print(f"| {'bs':>3} | {'mode':<34} | " + " | ".join(f"{c + ' us':>9}" for c in cols) + f" | {'step us':>9} | {'overhead':>9} |")
    print(f"|{'-' * 5}|{'-' * 36}|" + "|".join("-" * 11 for _ in cols) + f"|{'-' * 11}|{'-' * 11}|")
    for bs, mode, t in rows:
        parts = [t.median_us(c) for c in cols]
        total = sum(parts)
        over = total - baseline[bs]
        print(f"| {bs:>3} | {mode:<34} | " + " | ".join(f"{p:>9.0f}" for p in parts)
              + f" | {total:>9.0f} | {over:>+8.0f}  |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the embedded SmolLM2's)")
    parser.add_argument("--mask-fill-threads", type=int, default=2, help="xgrammar BatchGrammarMatcher threads (extra row)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    tokenizer = get_tokenizer(args.tokenizer)
    backends = {1: create_grammar_backend("xgrammar", tokenizer, VOCAB, stop_token_ids=[2])}
    if args.mask_fill_threads > 1:
        backends[args.mask_fill_threads] = create_grammar_backend(
            "xgrammar", tokenizer, VOCAB, stop_token_ids=[2], mask_fill_threads=args.mask_fill_threads)
    for backend in backends.values():
        for key in KEYS:
            backend.get_compiled(key)
    rows, baseline = [], {}
    for bs in args.batch_sizes:
        base = run_unconstrained(bs, args.steps, device)
        baseline[bs] = base.median_us("sample") + base.median_us("accept")
        rows.append((bs, "unconstrained", base))
        rows.append((bs, "bitmask + apply_vocab_mask", run_constrained(backends[1], bs, args.steps, device, False)))
        rows.append((bs, "bitmask -> bool vocab_mask", run_constrained(backends[1], bs, args.steps, device, True)))
        if args.mask_fill_threads > 1 and bs > 1:
            rows.append((bs, f"bitmask + apply, {args.mask_fill_threads} fill threads",
                         run_constrained(backends[args.mask_fill_threads], bs, args.steps, device, False)))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    print(f"# Constrained decoding per-step overhead: SmolLM2 vocab {VOCAB}, greedy Sampler, float32 logits on "
          f"{device} ({name}), {os.cpu_count()} cores (load {os.getloadavg()[0]:.1f}), torch threads {args.threads}, "
          f"torch {torch.__version__}, commit {git_commit(__file__)}, {args.steps} steps, grammars: JSON schema / any JSON / regex")
    print_table(rows, baseline)


if __name__ == "__main__":
    main()
