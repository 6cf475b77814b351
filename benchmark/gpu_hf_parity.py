"""Greedy parity with Hugging Face on the GPU: a random-weight Llama in bf16, same weights on both sides.

    python benchmark/gpu_hf_parity.py --config .models/llama-3.1-8b --layers 4 --new-tokens 32

Builds a Llama with the config's widths (and `--layers` layers) under a fixed seed, saves it
as safetensors, runs HF `generate(do_sample=False, eos_token_id=None)` per prompt and keeps
its logits, then runs our Engine (CUDA graphs and the overlap loop on, unless disabled by
flags) on the same folder. A token that differs is tolerated only where HF's top-2 logits at
that step are within `--tie-eps` (a near-tie that bf16 rounding may flip); the rest of that
sequence is then not compared. Prints a table and exits non-zero on a real mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import torch


def build_model(config_dir: str, layers: int, out_dir: str) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(config_dir)
    cfg.num_hidden_layers = layers
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)
    for name in os.listdir(config_dir):
        if name.startswith("tokenizer") or name.endswith(".jinja"):
            shutil.copy(os.path.join(config_dir, name), out_dir)


def hf_reference(model_dir: str, prompts: list[list[int]], new_tokens: int) -> tuple[list[list[int]], list[list[float]]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16).cuda().eval()
    outs, gaps = [], []
    for p in prompts:
        ids = torch.tensor([p], device="cuda")
        res = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=0, do_sample=False,
                             eos_token_id=None, return_dict_in_generate=True, output_logits=True)
        outs.append(res.sequences[0, len(p):].tolist())
        top2 = [torch.topk(l[0].float(), 2).values for l in res.logits]
        gaps.append([float(t[0] - t[1]) for t in top2])
    del model
    torch.cuda.empty_cache()
    return outs, gaps


def compare(ours: list[int], ref: list[int], gaps: list[float], eps: float) -> tuple[int, str]:
    for i, (a, b) in enumerate(zip(ours, ref)):
        if a != b:
            verdict = "near-tie" if gaps[i] < eps else "MISMATCH"
            return i, f"{verdict} at {i} (HF top-2 gap {gaps[i]:.2e})"
    return len(ref), "equal"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=".models/llama-3.1-8b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--tie-eps", type=float, default=1e-3)
    ap.add_argument("--disable-cuda-graph", action="store_true")
    ap.add_argument("--disable-overlap-schedule", action="store_true")
    ap.add_argument("--attention-backend", default="triton")
    args = ap.parse_args()

    from radixlm import Engine

    work = tempfile.mkdtemp(prefix="parity-")
    build_model(args.config, args.layers, work)
    vocab = json.load(open(os.path.join(args.config, "config.json")))["vocab_size"]
    g = torch.Generator().manual_seed(1)
    lens = [3, 17, 64, 100, 211, 256, 333, 400]
    prompts = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]
    ref, gaps = hf_reference(work, prompts, args.new_tokens)

    engine = Engine(model_path=work, dtype="bfloat16", attention_backend=args.attention_backend,
                    disable_cuda_graph=args.disable_cuda_graph,
                    disable_overlap_schedule=args.disable_overlap_schedule, mem_fraction_static=0.5)
    params = {"max_new_tokens": args.new_tokens, "temperature": 0, "ignore_eos": True}
    outs = engine.generate(input_ids=prompts, sampling_params=params)
    engine.shutdown()

    bad = 0
    print(f"\nGPU parity: Llama widths from {args.config}, {args.layers} layers, bf16, "
          f"backend={args.attention_backend}, cuda_graph={not args.disable_cuda_graph}, "
          f"overlap={not args.disable_overlap_schedule}")
    print("| prompt len | tokens equal | verdict |\n| --- | --- | --- |")
    for n, out, r, gp in zip(lens, outs, ref, gaps):
        same, verdict = compare(out["output_ids"], r, gp, args.tie_eps)
        bad += verdict.startswith("MISMATCH")
        print(f"| {n} | {same}/{len(r)} | {verdict} |")
    print(f"real mismatches: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
