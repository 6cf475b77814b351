"""Sweep the attention kernels' launch knobs on the GPU, on model-shaped cases (CUDA only).

    python benchmark/gpu_kernel_sweep.py            # decode and extend, Llama-3.1-8B head shapes

Decode: the KV pool is laid out as the allocator does it (each request's slots contiguous,
requests in shuffled order) and sized like a real pool (a GB or more per layer buffer), so
memory locality is what a serving step sees. Each config is checked against the torch
reference once, then timed in a CUDA graph (triton.testing.do_bench_cudagraph). Prints, per
case, the default's time and the best config's, and the bandwidth (decode) or TFLOP/s (extend).
"""

from __future__ import annotations

import argparse
import itertools

import torch

import radixlm_kernel as K
from radixlm_kernel import decode_attention as dec
from radixlm_kernel import decode_splits as dsplits
from radixlm_kernel import extend_attention as ext
from radixlm_kernel import reference as R

from gpu_cascade_sweep import run_shared_decode, run_unshared, sweep_cascade
from gpu_sweep_cases import (DEV, DT, HKV, HQ, D, bench, case_lens, case_tail, decode_case, decode_cases,
                             decode_launch, knob_owner, pool, time_configs)


def run_decode(cases: list[tuple[int, str]], configs: list[tuple[int, int, int, int]]) -> None:
    default = (dec.BLOCK_N, dec.NUM_WARPS, dec.NUM_STAGES, dsplits.OCCUPANCY)
    print("\n## decode attention (ms per layer call; TB/s of K+V read)")
    print("| bs x ctx | default " + str(default) + " | best | best config (BLOCK_N, warps, stages, occupancy) |")
    print("|---|---|---|---|")
    for bs, ctx in cases:
        lens_list = case_lens(ctx, bs)
        kb, vb, r2t, rows = pool(lens_list)
        lens = torch.tensor(lens_list, device=DEV)
        checked = sum(lens_list) <= 300_000
        q = torch.randn(bs, HQ, D, device=DEV, dtype=DT)
        o = torch.empty_like(q)
        ref = torch.empty_like(q)
        R.decode_attention_ref(q, kb, vb, ref, r2t, rows, lens, D ** -0.5) if checked else None
        nbytes = 2 * sum(lens_list) * HKV * D * 2
        launch: list = []

        def apply(cfg: tuple) -> None:
            dec.BLOCK_N, dec.NUM_WARPS, dec.NUM_STAGES, dsplits.OCCUPANCY = cfg
            launch[:] = decode_launch(lens)  # the splits follow OCCUPANCY

        def fn() -> None:
            grid, splits, logits, lse = launch
            K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, splits, D ** -0.5, grid, logits, lse)

        def check(cfg: tuple) -> None:
            if checked:
                torch.testing.assert_close(o, ref, atol=2e-2, rtol=2e-2)

        results = time_configs(configs, apply, fn, check)
        apply(default)
        best = min(results, key=results.get)
        d_ms = results.get(default, float("nan"))
        print(f"| {bs} x {ctx} | {d_ms * 1e3:.1f} us ({nbytes / d_ms / 1e9:.2f} TB/s) | "
              f"{results[best] * 1e3:.1f} us ({nbytes / results[best] / 1e9:.2f} TB/s) | {best} |", flush=True)
        del kb, vb
        torch.cuda.empty_cache()


def run_decode_fp8(cases: list[tuple[int, str]], configs: list[tuple]) -> None:
    """The decode kernel over an fp8_e4m3 pool, one config per tuple of `knobs`' values; the bf16 pool
    beside it with the default knobs."""
    knobs = ("FP8_BLOCK_N", "FP8_NUM_WARPS", "FP8_NUM_STAGES", "FP8_VIA_F16", "FP8_SWAP_AB")
    default = tuple(getattr(dec, k) for k in knobs)
    print("\n## decode attention, fp8_e4m3 K/V (us per layer call; TB/s of fp8 K+V read)")
    print(f"| bs x ctx | default {default} | best | best config {knobs} | bf16 pool, default knobs |")
    print("|---|---|---|---|---|")
    for bs, ctx in cases:
        lens_list = case_lens(ctx, bs)
        kb16, vb16, r2t, rows = pool(lens_list)
        kb, vb = kb16.to(torch.float8_e4m3fn), vb16.to(torch.float8_e4m3fn)
        lens = torch.tensor(lens_list, device=DEV)
        q = torch.randn(bs, HQ, D, device=DEV, dtype=DT)
        o = torch.empty_like(q)
        checked = sum(lens_list) <= 300_000
        if checked:
            ref = torch.empty_like(q)
            R.decode_attention_ref(q, kb.to(DT), vb.to(DT), ref, r2t, rows, lens, D ** -0.5)
        launch: list = []
        errors: dict = {}

        def apply(cfg: tuple) -> None:
            for name, value in zip(knobs, cfg):
                setattr(dec, name, value)
            launch[:] = decode_launch(lens, fp8=True)

        def attend(k_pool: torch.Tensor, v_pool: torch.Tensor) -> None:
            grid, splits, logits, lse = launch
            K.decode_attention_fwd(q, k_pool, v_pool, o, r2t, rows, lens, splits, D ** -0.5, grid, logits, lse)

        def check(cfg: tuple) -> None:
            if checked:
                errors[cfg] = (o.float() - ref.float()).abs().max().item()

        results = time_configs(configs, apply, lambda: attend(kb, vb), check)
        best = min(results, key=results.get)
        apply(default)
        t16 = bench(lambda: attend(kb16, vb16))
        d_ms = results.get(default, float("nan"))
        nbytes = 2 * sum(lens_list) * HKV * D
        print(f"| {bs} x {ctx} | {d_ms * 1e3:.1f} us ({nbytes / d_ms / 1e9:.2f} TB/s) | "
              f"{results[best] * 1e3:.1f} us ({nbytes / results[best] / 1e9:.2f} TB/s) | {best} | "
              f"{t16 * 1e3:.1f} us |", flush=True)
        for label, pick in (("reading up to bf16", lambda c: not c[3]), ("q on the left", lambda c: not c[4]),
                            ("K/V on the left", lambda c: c[4])):
            chosen = [c for c in results if pick(c)]
            if chosen:
                c = min(chosen, key=results.get)
                err = f", max error vs the reference {errors[c]:.2e}" if c in errors else ""
                print(f"  best {label}: {results[c] * 1e3:.1f} us at {c}{err}", flush=True)
        del kb, vb, kb16, vb16
        torch.cuda.empty_cache()


HEAD_KNOBS = {True: ("FP8_BLOCK_N", "FP8_NUM_WARPS", "FP8_NUM_STAGES", "FP8_SWAP_AB", "FP8_KV_HEADS",
                     "FP8_SLOTS_AHEAD"),
              False: ("BLOCK_N", "NUM_WARPS", "NUM_STAGES", "SWAP_AB", "KV_HEADS", "SLOTS_AHEAD")}


def run_decode_heads(cases: list[tuple[int, str]], configs: list[tuple], fp8: bool) -> None:
    """The decode kernel's knobs with kv heads per program, over an fp8_e4m3 or a bf16 pool; every
    config checked against the reference where the case is small enough; the best per heads count."""
    knobs = HEAD_KNOBS[fp8]
    default = tuple(getattr(dec, k) for k in knobs)
    configs = [default] + [c for c in configs if c != default]
    kind = "fp8_e4m3" if fp8 else "bf16"
    print(f"\n## decode attention, {kind} K/V, kv heads per program (us per layer call; TB/s of K+V read)")
    print(f"| bs x ctx | default {default} | best | best config {knobs} | best per heads count |")
    print("|---|---|---|---|---|")
    for bs, ctx in cases:
        c = decode_case(bs, ctx, fp8, case_tail(ctx))
        lens_list, kb, vb, r2t, rows, lens, q, o, ref = (c[k] for k in ("lens_list", "kb", "vb", "r2t", "rows",
                                                                       "lens", "q", "o", "ref"))
        checked = ref is not None
        launch: list = []
        errors: dict = {}

        def apply(cfg: tuple) -> None:
            for name, value in zip(knobs, cfg):
                setattr(dec, name, value)
            launch[:] = decode_launch(lens, dec.kv_heads_per_program(HKV, kb.dtype), fp8)

        def fn() -> None:
            grid, splits, logits, lse = launch
            K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, splits, D ** -0.5, grid, logits, lse)

        def check(cfg: tuple) -> None:
            if checked:
                errors[cfg] = (o.float() - ref.float()).abs().max().item()

        results = time_configs(configs, apply, fn, check)
        apply(default)
        best = min(results, key=results.get)
        d_ms = results.get(default, float("nan"))
        nbytes = 2 * sum(lens_list) * HKV * D * kb.element_size()
        per_heads = []
        for h in sorted({c[4] for c in results}):
            c = min((c for c in results if c[4] == h), key=results.get)
            err = f", err {errors[c]:.1e}" if c in errors else ""
            per_heads.append(f"{h}: {results[c] * 1e3:.1f} {c}{err}")
        print(f"| {bs} x {ctx} | {d_ms * 1e3:.1f} us ({nbytes / d_ms / 1e9:.2f} TB/s) | "
              f"{results[best] * 1e3:.1f} us ({nbytes / results[best] / 1e9:.2f} TB/s) | {best} | "
              f"{'; '.join(per_heads)} |", flush=True)
        bad = {c: e for c, e in errors.items() if e > (3e-2 if fp8 else 2e-2) * 4}
        if bad:
            print(f"  MISMATCH against the reference: {bad}", flush=True)
        del kb, vb, c
        torch.cuda.empty_cache()


def run_extend(cases: list[tuple[int, int, int]], configs: list[tuple[int, int, int, int]]) -> None:
    default = (ext.BLOCK_M, ext.BLOCK_N, ext.NUM_WARPS, ext.NUM_STAGES)
    print("\n## extend attention (ms; TFLOP/s over the unmasked half)")
    print("| reqs x (prefix + new) | default " + str(default) + " | best | best config (BLOCK_M, BLOCK_N, warps, stages) |")
    print("|---|---|---|---|")
    for reqs, prefix, new in cases:
        kb, vb, r2t, rows = pool([prefix + new] * reqs)
        lens = torch.full((reqs,), prefix + new, device=DEV)
        ext_lens = torch.full((reqs,), new, device=DEV)
        start = torch.arange(reqs, device=DEV) * new
        q = torch.randn(reqs * new, HQ, D, device=DEV, dtype=DT)
        k = torch.randn(reqs * new, HKV, D, device=DEV, dtype=DT)
        v = torch.randn_like(k)
        o = torch.empty_like(q)
        args = (r2t, rows, lens, ext_lens, start)
        ref = None
        if reqs * new * (prefix + new) <= 8192 * 4096:
            ref = torch.empty_like(q)
            R.extend_attention_ref(q, k, v, ref, kb, vb, *args, D ** -0.5)
        flops = 4 * reqs * HQ * D * new * (prefix + new / 2)
        def apply(cfg: tuple) -> None:
            ext.BLOCK_M, ext.BLOCK_N, ext.NUM_WARPS, ext.NUM_STAGES = cfg

        def fn() -> None:
            K.extend_attention_fwd(q, k, v, o, kb, vb, *args, new, D ** -0.5)

        def check(cfg: tuple) -> None:
            if ref is not None:
                torch.testing.assert_close(o, ref, atol=2e-2, rtol=2e-2)

        results = time_configs(configs, apply, fn, check)
        apply(default)
        best = min(results, key=results.get)
        d_ms = results.get(default, float("nan"))
        print(f"| {reqs} x ({prefix} + {new}) | {d_ms:.2f} ms ({flops / d_ms / 1e9:.0f} TFLOP/s) | "
              f"{results[best]:.2f} ms ({flops / results[best] / 1e9:.0f} TFLOP/s) | {best} |", flush=True)
        del kb, vb
        torch.cuda.empty_cache()


def run_decode_order(cases: list[tuple[int, str]], fp8: bool, configs: list[dict]) -> None:
    """Launch knobs as dicts of module attributes (plus "lpt": launch the longest contexts first, see
    `longest_first_order`), every config's time on every case; checked against the reference."""
    kind = "fp8_e4m3" if fp8 else "bf16"
    print(f"\n## decode attention, {kind} K/V: launch order and knobs (us per layer call, TB/s of K+V read)")
    print("| config | " + " | ".join(f"{bs} x {ctx}" for bs, ctx in cases) + " |")
    print("|---|" + "---|" * len(cases))
    saved = {k: getattr(knob_owner(k), k) for cfg in configs for k in cfg if k != "lpt"}
    times: dict[int, list[str]] = {i: [] for i in range(len(configs))}
    for bs, ctx in cases:
        c = decode_case(bs, ctx, fp8, case_tail(ctx))
        lens_list, kb, vb, r2t, rows, lens, q, o, ref = (c[k] for k in ("lens_list", "kb", "vb", "r2t", "rows",
                                                                       "lens", "q", "o", "ref"))
        lpt = K.longest_first_order(lens)
        counters = torch.zeros(bs, HKV, dtype=torch.int32, device=DEV)
        nbytes = 2 * sum(lens_list) * HKV * D * kb.element_size()
        for i, cfg in enumerate(configs):
            for name, value in saved.items():
                setattr(knob_owner(name), name, cfg.get(name, value))
            grid, splits, logits, lse = decode_launch(lens, dec.kv_heads_per_program(HKV, kb.dtype), fp8)
            order = lpt if cfg.get("lpt") else None

            def fn() -> None:
                K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, splits, D ** -0.5, grid, logits, lse,
                                       order=order, split_counters=counters)
            try:
                ms = bench(fn)
            except Exception as e:  # noqa: BLE001 - named in the table
                times[i].append(type(e).__name__)
                continue
            bad = ref is not None and (o.float() - ref.float()).abs().max().item() > 0.1
            times[i].append(f"{ms * 1e3:.1f} ({nbytes / ms / 1e9:.2f}){' MISMATCH' if bad else ''}")
        del kb, vb, c
        torch.cuda.empty_cache()
    for name, value in saved.items():
        setattr(knob_owner(name), name, value)
    for i, cfg in enumerate(configs):
        print(f"| {cfg} | " + " | ".join(times[i]) + " |", flush=True)


def run_decode_splits(cases: list[tuple[int, str]], fp8: bool) -> None:
    """Decode split counts over a bf16 or fp8_e4m3 pool: the eighteenth session's kernel (occupancy bands
    ((4, 2), (16, 3)), splits not aligned to the tile), the defaults for this pool (`OCCUPANCY_BANDS` and
    `ALIGN_SPLITS`, or their FP8_ twins), one occupancy for every batch size (2, 3, 4, 6, 8), and every fixed
    grid split count S (each row min(cdiv(len, MIN_SPLIT_LEN), S) splits), the last two with the default
    alignment. us per layer call in a CUDA graph (TB/s of K+V read); checked against the reference."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kind = "fp8_e4m3" if fp8 else "bf16"
    print(f"\n## decode attention, {kind} K/V: split counts (us per layer call, TB/s of K+V read)")
    print("| bs x ctx | eighteenth session: bands ((4, 2), (16, 3)), unaligned (S) | default (S) | one occupancy 2 / 3 / 4 / 6 / 8 (S) | "
          "best fixed S |")
    print("|---|---|---|---|---|")
    bands_knob, align_knob = ("FP8_OCCUPANCY_BANDS", "FP8_ALIGN_SPLITS") if fp8 else ("OCCUPANCY_BANDS", "ALIGN_SPLITS")
    saved = (dsplits.OCCUPANCY, getattr(dsplits, bands_knob), getattr(dec, align_knob))
    for bs, ctx in cases:
        c = decode_case(bs, ctx, fp8, case_tail(ctx))
        lens_list, kb, vb, r2t, rows, lens, q, o, ref = (c[k] for k in ("lens_list", "kb", "vb", "r2t", "rows",
                                                                       "lens", "q", "o", "ref"))
        nbytes = 2 * sum(lens_list) * HKV * D * kb.element_size()
        logits = torch.empty(bs, HQ, 32, D, device=DEV, dtype=torch.float32)
        lse = torch.empty(bs, HQ, 32, device=DEV, dtype=torch.float32)
        counters = torch.zeros(bs, HKV, dtype=torch.int32, device=DEV)

        def timed(grid: int) -> str:
            def fn() -> None:
                K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, None, D ** -0.5, grid, logits, lse,
                                       split_counters=counters)
            ms = bench(fn)
            bad = ref is not None and (o.float() - ref.float()).abs().max().item() > (3e-2 if fp8 else 2e-2) * 4
            return f"{ms * 1e3:.1f} ({nbytes / ms / 1e9:.2f}){' MISMATCH' if bad else ''}"

        def with_bands(occupancy: int, bands: tuple, align: bool) -> str:
            dsplits.OCCUPANCY = occupancy
            setattr(dsplits, bands_knob, bands)
            setattr(dec, align_knob, align)
            grid = K.grid_kv_splits(bs, HKV, 32, sms, fp8=fp8)
            return f"{timed(grid)} ({grid})"

        old = with_bands(2, ((4, 2), (16, 3)), False)  # the eighteenth session's kernel
        new = with_bands(*saved)
        one = [with_bands(occ, (), saved[2]) for occ in (2, 3, 4, 6, 8)]
        fixed = {s: timed(s) for s in (2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32)}
        dsplits.OCCUPANCY = saved[0]
        setattr(dsplits, bands_knob, saved[1])
        setattr(dec, align_knob, saved[2])
        best_s = min(fixed, key=lambda s: float(fixed[s].split()[0]))
        print(f"| {bs} x {ctx} | {old} | {new} | {' / '.join(one)} | {fixed[best_s]} at S={best_s} |", flush=True)
        print("  fixed S: " + ", ".join(f"{s}: {v}" for s, v in fixed.items()), flush=True)
        del kb, vb, c
        torch.cuda.empty_cache()


FP8_ORDER_CONFIGS = [{}, {"lpt": True}, {"HEADS_FASTEST": True}, {"HEADS_FASTEST": True, "lpt": True},
                     *({"FP8_NUM_WARPS": 2, "FP8_SWAP_AB": False, "FP8_SLOTS_AHEAD": True, **extra}
                       for extra in ({}, {"lpt": True}, {"HEADS_FASTEST": True}, {"HEADS_FASTEST": True, "lpt": True})),
                     {"FP8_SLOTS_AHEAD": True, "HEADS_FASTEST": True, "lpt": True},
                     {"FP8_NUM_WARPS": 2, "FP8_SWAP_AB": True, "FP8_SLOTS_AHEAD": True, "HEADS_FASTEST": True,
                      "lpt": True},
                     {"FP8_BLOCK_N": 128, "FP8_NUM_WARPS": 4, "FP8_SWAP_AB": False, "FP8_SLOTS_AHEAD": True,
                      "HEADS_FASTEST": True, "lpt": True}]
BF16_ORDER_CONFIGS = [{}, {"lpt": True}, {"HEADS_FASTEST": True}, {"HEADS_FASTEST": True, "lpt": True},
                      {"SLOTS_AHEAD": True, "HEADS_FASTEST": True, "lpt": True},
                      {"NUM_WARPS": 4, "SLOTS_AHEAD": True}, {"NUM_WARPS": 4, "SLOTS_AHEAD": True, "lpt": True},
                      {"FUSED_MERGE": True}, {"FUSED_MERGE": True, "HEADS_FASTEST": True},
                      {"FUSED_MERGE": True, "NUM_WARPS": 4, "SLOTS_AHEAD": True},
                      {"FUSED_MERGE": True, "NUM_WARPS": 4, "SLOTS_AHEAD": True, "HEADS_FASTEST": True}]
SMALL_ORDER_CONFIGS = [{}, {"FUSED_MERGE": True}, {"FUSED_MERGE": True, "HEADS_FASTEST": True},
                       {"NUM_WARPS": 4, "SLOTS_AHEAD": True}, {"FUSED_MERGE": True, "NUM_WARPS": 4, "SLOTS_AHEAD": True},
                       {"FUSED_MERGE": True, "NUM_WARPS": 4, "SLOTS_AHEAD": True, "HEADS_FASTEST": True},
                       {"FUSED_MERGE": True, "BLOCK_N": 32, "NUM_WARPS": 4, "SLOTS_AHEAD": True}]

# split programs per SM (OCCUPANCY_BANDS by batch size, OCCUPANCY above them) and the fused merge's reach. The
# questions the nineteenth session left: does the fused merge pay at the 13-17 grid splits the bands give 5-8 rows
# (short contexts: the separate merge launch); do more splits help batches above 16 rows, which the server launches
# longest context first ("lpt", as its cascade path does when no prefix is shared)
OCCUPANCY_CONFIGS = [{}, {"FUSED_MERGE_MAX_SPLITS": 16}, {"FUSED_MERGE_MAX_SPLITS": 32},
                     {"OCCUPANCY_BANDS": ((4, 2), (16, 3))}, {"lpt": True}, {"OCCUPANCY": 3, "lpt": True},
                     {"OCCUPANCY": 4, "lpt": True}, {"OCCUPANCY": 6, "lpt": True}]


# the fused merge (the last split program merges) up to 8 (the default) or 32 grid splits
MERGE_CONFIGS = [{}, {"FUSED_MERGE_MAX_SPLITS": 32}]

# (BLOCK_N, warps, stages, K/V on the left, kv heads per program, slot ids one tile ahead)
FP8_HEAD_CONFIGS = [(64, 4, 3, True, 2, False), (32, 4, 3, True, 2, False), (32, 4, 3, True, 4, False),
                    (64, 4, 3, True, 1, True), (128, 4, 3, True, 1, True), (64, 4, 2, True, 1, True),
                    (64, 4, 4, True, 1, True), (64, 2, 3, False, 1, True), (64, 8, 3, True, 1, True),
                    (32, 4, 3, True, 1, True), (128, 4, 3, True, 1, False), (64, 4, 4, True, 1, False)]
BF16_HEAD_CONFIGS = [(64, 4, 3, False, 2, False), (64, 2, 3, False, 1, True), (64, 2, 4, False, 1, True),
                     (64, 4, 3, False, 1, True), (32, 2, 3, False, 1, True), (128, 4, 3, False, 1, True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decode", default="1x256,1x4096,8x2048,64x2048,256x2048,512x2300")
    parser.add_argument("--extend", default="1x0x8192,4x0x2048,1x4096x4096,16x2048x128,8x0x512")
    parser.add_argument("--quick", action="store_true", help="a few configs only")
    parser.add_argument("--shared-only", action="store_true", help="only the shared-prefix decode cases")
    parser.add_argument("--fp8-only", action="store_true", help="only the decode kernel over an fp8 pool")
    parser.add_argument("--heads-only", action="store_true",
                        help="only the decode kernel with several kv heads per program, fp8 and bf16 pools")
    parser.add_argument("--small", default="1x256,1x512,1x4096,4x2048,8x2048,16x1024",
                        help="the small-batch cases of --order-only (bf16 pool, the merge knobs)")
    parser.add_argument("--order-only", action="store_true",
                        help="only the decode kernel's launch order (longest first, a row's heads side by side)")
    parser.add_argument("--occupancy-only", action="store_true",
                        help="only split programs per SM and the fused merge's reach on --decode (bf16 and fp8 pools)")
    parser.add_argument("--splits-only", action="store_true",
                        help="only the decode kernel's split counts on --decode (bf16) and --fp8-decode")
    parser.add_argument("--fp8-decode", default="", help="--splits-only: the fp8 cases (default: --decode)")
    parser.add_argument("--merge-only", action="store_true",
                        help="only the fused merge's reach on --decode (bf16 and fp8 pools)")
    args = parser.parse_args()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if args.splits_only:
        run_decode_splits(decode_cases(args.decode), fp8=False)
        run_decode_splits(decode_cases(args.fp8_decode or args.decode), fp8=True)
        return
    if args.merge_only:
        run_decode_order(decode_cases(args.decode), False, MERGE_CONFIGS)
        run_decode_order(decode_cases(args.decode), True, MERGE_CONFIGS)
        return
    if args.occupancy_only:
        run_decode_order(decode_cases(args.decode), False, OCCUPANCY_CONFIGS)
        run_decode_order(decode_cases(args.decode), True, OCCUPANCY_CONFIGS)
        return
    if args.order_only:
        run_decode_order(decode_cases(args.decode), True, FP8_ORDER_CONFIGS)
        run_decode_order(decode_cases(args.decode), False, BF16_ORDER_CONFIGS)
        run_decode_order(decode_cases(args.small), False, SMALL_ORDER_CONFIGS)
        return
    if args.heads_only:
        run_decode_heads(decode_cases(args.decode), FP8_HEAD_CONFIGS, fp8=True)
        run_decode_heads(decode_cases(args.decode), BF16_HEAD_CONFIGS, fp8=False)
        return
    if args.fp8_only:
        kernels = [(64, 2, 3, True, False), (64, 4, 2, True, False), (64, 2, 3, True, True), (64, 4, 3, True, True),
                   (64, 4, 4, True, True), (128, 4, 3, True, True), (128, 4, 4, True, True)]
        f8 = kernels + [(64, 2, 3, False, False), (64, 4, 3, False, True), (32, 4, 3, True, True)]
        default_f8 = (dec.FP8_BLOCK_N, dec.FP8_NUM_WARPS, dec.FP8_NUM_STAGES, dec.FP8_VIA_F16, dec.FP8_SWAP_AB)
        run_decode_fp8(decode_cases(args.decode), [default_f8] + [c for c in f8 if c != default_f8])
        return
    dconfigs = [(bn, w, st, occ) for bn, w, st in itertools.product([32, 64, 128], [2, 4, 8], [1, 2, 3])
                for occ in [2]] + [(64, 4, 2, 1), (64, 4, 2, 4), (32, 4, 2, 4), (64, 2, 3, 1), (64, 2, 3, 4)]
    econfigs = [(128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 2), (64, 64, 4, 3),
                (128, 32, 4, 2), (128, 64, 4, 2), (64, 128, 8, 2), (128, 128, 8, 3), (64, 32, 4, 3), (64, 64, 8, 2)]
    if args.quick:
        dconfigs, econfigs = dconfigs[:3], econfigs[:3]
    default_d = (dec.BLOCK_N, dec.NUM_WARPS, dec.NUM_STAGES, dsplits.OCCUPANCY)
    default_e = (ext.BLOCK_M, ext.BLOCK_N, ext.NUM_WARPS, ext.NUM_STAGES)
    dconfigs = [default_d] + [c for c in dconfigs if c != default_d]
    econfigs = [default_e] + [c for c in econfigs if c != default_e]
    shared = run_shared_decode(32, 16, 2048, 256)
    run_shared_decode(4, 64, 1024, 300)
    run_shared_decode(1, 16, 4096, 100)
    run_unshared([(136, 2048), (256, 2048), (512, 2300)])
    sweep_cascade(32, 16, 2048, 256)
    print(f"cascade: shared-prefix speedup {shared:.2f}x over prefix order", flush=True)
    if args.shared_only:
        return
    run_decode(decode_cases(args.decode), dconfigs)
    run_extend([tuple(int(x) for x in c.split("x")) for c in args.extend.split(",")], econfigs)


if __name__ == "__main__":
    main()
