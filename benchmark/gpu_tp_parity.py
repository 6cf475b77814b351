"""Tensor parallelism on real devices: TP=N greedy outputs against TP=1 on the same random weights.

    python benchmark/gpu_tp_parity.py --config .models/llama-3.1-8b --tp-size 2          # two GPUs (issue 9)
    python benchmark/gpu_tp_parity.py --config /tmp/tiny --device cpu --dtype float32     # smoke run (gloo)

One random checkpoint (HF's init, seeded) is saved as safetensors and loaded by both Engines,
each rank taking its shard: `--load-format dummy` would not do, since dummy weights are drawn
per shard and two TP sizes would hold different models. The Engine runs with its defaults
(CUDA graphs and the overlap loop on CUDA). Prints a table per prompt and `tp_parity: PASS/FAIL`;
a difference is reported with both engines' top-2 logprob gaps at that position, since a
different all-reduce order rounds differently and can flip a near-tie.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from typing import Optional

import torch

from radixlm.benchmark.gpu_hf_parity import DTYPES, PROMPT_LENS, build_model, our_top2_gaps


def run(model_dir: str, tp_size: int, prompts: list[list[int]], new_tokens: int, args: argparse.Namespace
        ) -> list[dict]:
    from radixlm import Engine

    kw = dict(dtype=args.dtype, device=args.device, tp_size=tp_size, log_level="warning")
    if args.device == "cuda":
        kw["mem_fraction_static"] = args.mem_fraction_static
    else:
        kw["max_total_tokens"] = 4 * (max(len(p) for p in prompts) + new_tokens) * len(prompts)
    params = {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}
    with Engine(model_path=model_dir, **kw) as engine:
        return engine.generate(input_ids=prompts, sampling_params=params, return_logprob=True, top_logprobs_num=2)


def first_difference(a: list[int], b: list[int]) -> Optional[int]:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=".models/llama-3.1-8b", help="folder with config.json (and a tokenizer)")
    ap.add_argument("--layers", type=int, default=0, help="override num_hidden_layers (0: the config's)")
    ap.add_argument("--tp-size", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--prompt-lens", type=int, nargs="+", default=PROMPT_LENS)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--init-std", type=float, default=0.02)
    ap.add_argument("--mem-fraction-static", type=float, default=0.6)
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="tp-parity-")
    try:
        cfg = build_model(args.config, args.layers or None, args.init_std, DTYPES[args.dtype], args.device, work)
        if args.device == "cuda":
            torch.cuda.empty_cache()  # the built model is gone; the Engines take the memory
        g = torch.Generator().manual_seed(1)
        prompts = [torch.randint(0, cfg["vocab_size"], (n,), generator=g).tolist() for n in args.prompt_lens]
        ref = run(work, 1, prompts, args.new_tokens, args)
        got = run(work, args.tp_size, prompts, args.new_tokens, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"setup: {cfg.get('architectures')} widths from {args.config}, {cfg['num_hidden_layers']} layers, "
          f"{args.dtype} on {args.device}, TP=1 vs TP={args.tp_size}, {len(prompts)} prompts x {args.new_tokens}")
    print("| prompt len | tokens equal | first diff | TP=1 top-2 gap there | TP=N top-2 gap there |")
    print("|---|---|---|---|---|")
    failures = 0
    for n, a, b in zip(args.prompt_lens, ref, got):
        ta, tb = a["output_ids"], b["output_ids"]
        d = first_difference(ta, tb)
        equal = sum(x == y for x, y in zip(ta, tb))
        if d is None:
            print(f"| {n} | {equal}/{len(ta)} | - | - | - |")
            continue
        failures += 1
        ga, gb = our_top2_gaps(a), our_top2_gaps(b)
        fmt = lambda gaps: "n/a" if not gaps or d >= len(gaps) or gaps[d] is None else f"{gaps[d]:.4g}"  # noqa: E731
        print(f"| {n} | {equal}/{len(ta)} | {d} | {fmt(ga)} | {fmt(gb)} |")
    verdict = "PASS" if failures == 0 else "FAIL"
    print(f"tp_parity: {verdict} ({failures} of {len(prompts)} prompts differ)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
