"""Shared-prefix decode on the GPU (CUDA only): the standard kernel in natural and prefix order against
the cascade path (a group's prefix read once), the cascade kernel's knobs, and what the cascade path
costs a batch with nothing to share. `gpu_kernel_sweep.py` runs these first (`--shared-only`: only these).
"""

from __future__ import annotations

import itertools

import torch

import radixlm_kernel as K
from radixlm_kernel import reference as R

from gpu_sweep_cases import DEV, DT, HKV, HQ, D, bench, decode_launch, pool


def shared_pool(groups: int, per_group: int, prefix: int, suffix: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Requests in groups sharing their first `prefix` slots (as the radix cache hands them out), in a
    shuffled batch; (k, v, req_to_token, rows, seq_lens)."""
    bs = groups * per_group
    kb, vb, own, rows = pool([suffix] * bs, extra=groups * prefix)
    base = int(own.max()) + 1
    r2t = torch.zeros(bs, prefix + suffix + 8, dtype=torch.int32, device=DEV)
    member = torch.randperm(bs).tolist()  # request i belongs to group member[i] % groups
    for i in range(bs):
        g = member[i] % groups
        r2t[i, :prefix] = torch.arange(base + g * prefix, base + (g + 1) * prefix, dtype=torch.int32, device=DEV)
        r2t[i, prefix:prefix + suffix] = own[i, :suffix]
    return kb, vb, r2t, rows, torch.full((bs,), prefix + suffix, device=DEV)


def cascade_call(q, kb, vb, o, r2t, rows, lens, logits, lse):
    """(plan-once, per-layer attention) callables as the triton backend runs them."""
    bs, sms = lens.shape[0], torch.cuda.get_device_properties(0).multi_processor_count
    cap = 32 - K.cascade_attention.PREFIX_SPLITS
    members = K.members_per_block(HQ // HKV)
    state = {}

    def plan() -> None:
        state["plan"] = K.cascade_plan(r2t, rows, lens, members)
        state["splits"] = K.compute_num_kv_splits(lens - state["plan"].pre_len, HKV, cap, sms)

    def attend() -> None:
        K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, state["splits"], D ** -0.5,
                               K.grid_kv_splits(bs, HKV, cap, sms), logits, lse, cascade=state["plan"])

    plan()
    return plan, attend


def run_shared_decode(groups: int, per_group: int, prefix: int, suffix: int) -> float:
    """Shared-prefix decode: natural launch order, `prefix_order`, and the cascade (plan timed apart: it
    runs once per step, the attention once per layer). Returns the cascade's speedup over `prefix_order`."""
    kb, vb, r2t, rows, lens = shared_pool(groups, per_group, prefix, suffix)
    bs = lens.shape[0]
    q = torch.randn(bs, HQ, D, device=DEV, dtype=DT)
    grid, splits, logits, lse = decode_launch(lens)
    order = K.prefix_order(r2t, rows)
    outs, times = [], []
    for o_arg in (None, order):
        o = torch.empty_like(q)
        times.append(bench(lambda: K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, splits, D ** -0.5, grid,
                                                          logits, lse, order=o_arg)))
        outs.append(o)
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)
    oc = torch.full_like(q, float("nan"))
    plan, attend = cascade_call(q, kb, vb, oc, r2t, rows, lens, logits, lse)
    t_plan, t_casc = bench(plan), bench(attend)
    torch.testing.assert_close(oc, outs[0], atol=2e-2, rtol=2e-2)
    nbytes = 2 * bs * (prefix + suffix) * HKV * D * 2
    read = 2 * (groups * prefix + bs * suffix) * HKV * D * 2
    print(f"\n## decode, {groups} groups x {per_group} sharing {prefix} slots + {suffix} own (bs {bs}): "
          f"natural order {times[0] * 1e3:.1f} us ({nbytes / times[0] / 1e9:.2f} TB/s as if unshared), "
          f"prefix order {times[1] * 1e3:.1f} us, "
          f"cascade {t_casc * 1e3:.1f} us ({read / t_casc / 1e9:.2f} TB/s of distinct K+V) + plan "
          f"{t_plan * 1e3:.1f} us per step; cascade speedup {times[1] / t_casc:.2f}x", flush=True)
    return times[1] / t_casc


def sweep_cascade(groups: int, per_group: int, prefix: int, suffix: int) -> None:
    """The cascade prefix kernel's knobs on one shared-prefix case."""
    cas = K.cascade_attention
    kb, vb, r2t, rows, lens = shared_pool(groups, per_group, prefix, suffix)
    q = torch.randn(lens.shape[0], HQ, D, device=DEV, dtype=DT)
    _, _, logits, lse = decode_launch(lens)
    ref = torch.empty_like(q)
    R.decode_attention_ref(q, kb, vb, ref, r2t, rows, lens, D ** -0.5)
    default = (cas.PREFIX_SPLIT_LEN, cas.BLOCK_N, cas.NUM_WARPS, cas.NUM_STAGES)
    results = {}
    for cfg in itertools.product([256, 512, 1024], [32, 64], [4, 8], [2, 3]):
        cas.PREFIX_SPLIT_LEN, cas.BLOCK_N, cas.NUM_WARPS, cas.NUM_STAGES = cfg
        o = torch.empty_like(q)
        try:
            _, attend = cascade_call(q, kb, vb, o, r2t, rows, lens, logits, lse)
            results[cfg] = bench(attend)
        except Exception as e:  # noqa: BLE001 - shared memory
            print(f"  skip {cfg}: {type(e).__name__}")
            continue
        torch.testing.assert_close(o, ref, atol=2e-2, rtol=2e-2)
    cas.PREFIX_SPLIT_LEN, cas.BLOCK_N, cas.NUM_WARPS, cas.NUM_STAGES = default
    best = min(results, key=results.get)
    print(f"## cascade knobs, {groups} x {per_group} sharing {prefix} + {suffix}: default {default} "
          f"{results.get(default, float('nan')) * 1e3:.1f} us, best {best} {results[best] * 1e3:.1f} us "
          f"(PREFIX_SPLIT_LEN, BLOCK_N, warps, stages)", flush=True)


def run_unshared(cases: list[tuple[int, int]]) -> None:
    """Unshared contexts: the cascade path (its plan finds no groups) against the standard kernel, what
    the cascade costs a batch with nothing to share."""
    for bs, ctx in cases:
        kb, vb, r2t, rows = pool([ctx] * bs)
        lens = torch.full((bs,), ctx, device=DEV)
        q = torch.randn(bs, HQ, D, device=DEV, dtype=DT)
        o1, o3 = torch.empty_like(q), torch.empty_like(q)
        grid, splits, logits, lse = decode_launch(lens)
        order = K.prefix_order(r2t, rows)
        t1 = bench(lambda: K.decode_attention_fwd(q, kb, vb, o1, r2t, rows, lens, splits, D ** -0.5, grid, logits,
                                                  lse, order=order))
        plan, attend = cascade_call(q, kb, vb, o3, r2t, rows, lens, logits, lse)
        t3, t_plan = bench(attend), bench(plan)
        torch.testing.assert_close(o3, o1, atol=2e-2, rtol=2e-2)
        print(f"## decode unshared bs {bs} x {ctx}: standard {t1 * 1e3:.1f} us, cascade path {t3 * 1e3:.1f} us "
              f"+ plan {t_plan * 1e3:.1f} us per step", flush=True)
        del kb, vb
        torch.cuda.empty_cache()
