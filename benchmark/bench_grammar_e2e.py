"""End-to-end per-step cost of constrained decoding, through the Engine (scheduler, overlap
loop, mask fill, sampler, matcher accept), against the same batch unconstrained.

    python benchmark/bench_grammar_e2e.py [--batch-sizes 1 32] [--steps 64] [--repeats 2]

Per step = (time of a greedy batch with max_new_tokens=steps - the same with 1) / (steps - 1),
best of `repeats`, so the prefill cancels out. The grammars do not end before `steps`
tokens (a fixed-length regex; a JSON array of strings, which the model keeps extending),
so every row decodes every step; the table shows the fewest tokens a row produced.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Optional

import radixlm
from radixlm.provenance import git_commit

PROMPTS = ["Write a long list of fruits:", "Notes from the meeting:", "The history of Rome:", "def parse(text):"]
GRAMMARS: dict[str, Optional[dict]] = {
    "unconstrained": None,
    "regex [a-z ]{2000}": {"regex": "[a-z ]{2000}"},
    "json array of strings": {"json_schema": json.dumps({"type": "object", "required": ["notes"], "properties": {
        "notes": {"type": "array", "items": {"type": "string", "maxLength": 40}}}})},
}


def timed_batch(engine: radixlm.Engine, bs: int, grammar: Optional[dict], max_new: int) -> tuple[float, int]:
    params = {"temperature": 0.0, "max_new_tokens": max_new, "ignore_eos": True, **(grammar or {})}
    prompts = [PROMPTS[i % len(PROMPTS)] + f" ({i})" for i in range(bs)]
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    return time.perf_counter() - start, min(o["meta_info"]["completion_tokens"] for o in outs)


def per_step_ms(engine: radixlm.Engine, bs: int, grammar: Optional[dict], steps: int, repeats: int) -> tuple[float, int]:
    timed_batch(engine, bs, grammar, 2)  # warm: compile the grammar, fill the prefix cache
    full = [timed_batch(engine, bs, grammar, steps) for _ in range(repeats)]
    one = min(timed_batch(engine, bs, grammar, 1)[0] for _ in range(repeats))
    best = min(t for t, _ in full)
    return (best - one) / (steps - 1) * 1e3, min(n for _, n in full)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    kwargs = dict(max_total_tokens=16384, log_level="warning")
    if args.device:
        kwargs["device"] = args.device
    with radixlm.Engine(**kwargs) as engine:
        rows = [(bs, name, *per_step_ms(engine, bs, g, args.steps, args.repeats))
                for bs in args.batch_sizes for name, g in GRAMMARS.items()]
    print(f"SmolLM2-135M (embedded), {args.device or 'default device'}, greedy, overlap loop on, "
          f"{args.steps} steps, best of {args.repeats}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, commit {git_commit(__file__)}")
    print("| batch | grammar | ms / step | vs unconstrained | min tokens / row |")
    print("| ---: | --- | ---: | ---: | ---: |")
    base = {bs: ms for bs, name, ms, _ in rows if name == "unconstrained"}
    for bs, name, ms, tokens in rows:
        print(f"| {bs} | {name} | {ms:.1f} | {ms / base[bs]:.2f}x (+{ms - base[bs]:.1f} ms) | {tokens} |")


if __name__ == "__main__":
    main()
