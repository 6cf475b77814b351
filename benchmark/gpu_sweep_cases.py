"""The cases the GPU kernel sweeps time (CUDA only): model-shaped KV pools laid out as the allocator
lays them out, decode batches of given or random context lengths, and the timing helpers
(`gpu_kernel_sweep.py` and `gpu_cascade_sweep.py` share them).
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable

import torch
import triton.testing

import radixlm_kernel as K
from radixlm_kernel import decode_attention as dec
from radixlm_kernel import decode_splits as dsplits
from radixlm_kernel import reference as R

HQ, HKV, D = 32, 8, 128
DEV, DT = "cuda", torch.bfloat16


def knob_owner(name: str) -> ModuleType:
    """The kernel module that holds launch knob `name` (the split counts' own module, or the decode kernel's)."""
    return dsplits if hasattr(dsplits, name) else dec


def pool(lens: list[int], extra: int = 0, tail_frac: float = 0.0
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """K/V buffers and req_to_token rows: contiguous slot runs per request (a prefill's), requests
    shuffled; with `tail_frac`, the last fraction of each request's tokens is allocated one token per
    request in turn after them, as decode steps allocate."""
    total = sum(lens) + extra + 1
    kb = torch.randn(total, HKV, D, device=DEV, dtype=DT)
    vb = torch.randn_like(kb)
    order = torch.randperm(len(lens)).tolist()
    tails = [int(n * tail_frac) for n in lens]
    slots: list[list[int]] = [[] for _ in lens]
    at = 1
    for i in order:
        slots[i], at = list(range(at, at + lens[i] - tails[i])), at + lens[i] - tails[i]
    for step in range(max(tails, default=0)):
        for i in order:
            if step < tails[i]:
                slots[i].append(at)
                at += 1
    r2t = torch.zeros(len(lens), max(lens) + 8, dtype=torch.int32, device=DEV)
    for i, row in enumerate(slots):
        r2t[i, :len(row)] = torch.tensor(row, dtype=torch.int32, device=DEV)
    return kb, vb, r2t, torch.arange(len(lens), device=DEV)


def bench(fn) -> float:
    fn()
    return triton.testing.do_bench_cudagraph(fn, rep=30)


def time_configs(configs: list[tuple], apply: Callable[[tuple], None], fn: Callable[[], None],
                 check: Callable[[tuple], None]) -> dict[tuple, float]:
    """Each config applied in turn and `fn` timed (ms); a config that does not compile (shared memory)
    is skipped; `check(cfg)` then looks at the output of its last call."""
    results = {}
    for cfg in configs:
        apply(cfg)
        try:
            ms = bench(fn)
        except Exception as e:  # noqa: BLE001 - skipped, named in the log
            print(f"  skip {cfg}: {type(e).__name__}")
            continue
        check(cfg)
        results[cfg] = ms
    return results


def decode_launch(lens: torch.Tensor, heads: int = 1, fp8: bool = False
                  ) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the triton backend hands `decode_attention_fwd` for these lengths, with the current knobs
    (`heads` kv heads per program, `fp8`: over an fp8 pool): (grid splits, per-request splits, partial-output and
    log-sum-exp scratch)."""
    bs, sms = lens.shape[0], torch.cuda.get_device_properties(0).multi_processor_count
    logits = torch.empty(bs, HQ, 32, D, device=DEV, dtype=torch.float32)
    lse = torch.empty(bs, HQ, 32, device=DEV, dtype=torch.float32)
    return (K.grid_kv_splits(bs, HKV, 32, sms, heads, fp8),
            K.compute_num_kv_splits(lens, HKV, 32, sms, heads_per_program=heads, fp8=fp8),
            logits, lse)


def decode_cases(spec: str) -> list[tuple[int, str]]:
    """"BSxCTX,..."; a trailing "r" (e.g. 256x2800r) draws the lengths uniformly in [1, 2 * CTX - 1] instead,
    as a serving batch has them (the split count and tail tiles then differ per request); a trailing "i"
    draws them so too and allocates the last 40% of each request's tokens interleaved (see `pool`)."""
    return [(int(c.split("x")[0]), c.split("x")[1]) for c in spec.split(",")]


def case_lens(ctx: str, bs: int, seed: int = 0) -> list[int]:
    """The `bs` context lengths of a `decode_cases` entry."""
    if ctx[-1] in "ri":
        mean = int(ctx[:-1])
        g = torch.Generator().manual_seed(seed)
        return torch.randint(1, 2 * mean, (bs,), generator=g).tolist()
    return [int(ctx)] * bs


def case_tail(ctx: str) -> float:
    """The interleaved fraction of a `decode_cases` entry's pool layout."""
    return 0.4 if ctx.endswith("i") else 0.0


def decode_case(bs: int, ctx: str, fp8: bool, tail_frac: float = 0.0) -> dict:
    """One case's pool (fp8_e4m3 or bf16), lengths, q, output buffer and, when small enough to compute,
    the reference output (keys: lens_list, kb, vb, r2t, rows, lens, q, o, ref)."""
    lens_list = case_lens(ctx, bs)
    kb, vb, r2t, rows = pool(lens_list, tail_frac=tail_frac)
    if fp8:
        kb, vb = kb.to(torch.float8_e4m3fn), vb.to(torch.float8_e4m3fn)
    lens = torch.tensor(lens_list, device=DEV)
    q = torch.randn(bs, HQ, D, device=DEV, dtype=DT)
    ref = None
    if sum(lens_list) <= 300_000:
        ref = torch.empty_like(q)
        R.decode_attention_ref(q, kb.to(DT), vb.to(DT), ref, r2t, rows, lens, D ** -0.5)
    return dict(lens_list=lens_list, kb=kb, vb=vb, r2t=r2t, rows=rows, lens=lens, q=q, o=torch.empty_like(q),
                ref=ref)
