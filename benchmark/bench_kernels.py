"""Time each radixlm_kernel op against its torch reference at Llama-3.1-8B shapes (CUDA, bf16).

    python benchmark/bench_kernels.py [--only decode_attention,rmsnorm]

Shapes: hidden 4096, intermediate 14336, 32 q heads, 8 kv heads, head_dim 128, vocab
128256; decode attention at batch 1/64 x context 512/4096. Every case first checks the
kernel against the reference in bf16, then times both with `triton.testing.do_bench`
(medians) and prints achieved GB/s (bytes that must move / time) beside the ceiling of
the H200 (4.28 TB/s device-to-device copy, see shared/device/README.md).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

try:
    import radixlm_kernel as K
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sgl-kernel"))
    import radixlm_kernel as K
import triton.testing
from radixlm_kernel import reference as R

from radixlm.provenance import git_commit

HIDDEN, INTER, HQ, HKV, D, VOCAB = 4096, 14336, 32, 8, 128, 128256
DEV, DT = "cuda", torch.bfloat16
MAX_KV_SPLITS = 32  # as the triton attention backend


@dataclass
class Case:
    name: str
    kernel: Callable[[], object]
    torch_ref: Callable[[], object]
    check: Callable[[], None]
    bytes_moved: int
    ref_graph: bool = True  # False where the reference syncs the host (cannot be captured)


def _median_ms(fn: Callable[[], object], graph: bool) -> float:
    """Median ms; `graph` replays `fn` from a CUDA graph, so the time is the GPU's alone (no launch overhead)."""
    if graph:
        t = triton.testing.do_bench_cudagraph(fn, rep=50, quantiles=[0.5])
    else:
        t = triton.testing.do_bench(fn, warmup=25, rep=100, quantiles=[0.5])
    return t[0] if isinstance(t, (list, tuple)) else t  # one quantile comes back bare in newer triton


def _close(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    torch.testing.assert_close(a.float(), b.float(), atol=3e-2, rtol=3e-2, msg=lambda m: f"{name}: {m}")


def norm_cases(tokens: int) -> list[Case]:
    x = torch.randn(tokens, HIDDEN, device=DEV, dtype=DT)
    res = torch.randn_like(x)
    w = torch.randn(HIDDEN, device=DEV, dtype=DT)
    n = x.numel() * 2

    def check_fused() -> None:
        a, ra, b, rb = x.clone(), res.clone(), x.clone(), res.clone()
        K.fused_add_rmsnorm(a, ra, w, 1e-5)
        R.fused_add_rmsnorm_ref(b, rb, w, 1e-5)
        _close(a, b, "fused_add_rmsnorm")

    return [
        Case(f"rmsnorm T={tokens}", lambda: K.rmsnorm(x, w, 1e-5), lambda: R.rmsnorm_ref(x, w, 1e-5),
             lambda: _close(K.rmsnorm(x, w, 1e-5), R.rmsnorm_ref(x, w, 1e-5), "rmsnorm"), 2 * n),
        Case(f"fused_add_rmsnorm T={tokens}", lambda: K.fused_add_rmsnorm(x, res, w, 1e-5),
             lambda: R.fused_add_rmsnorm_ref(x, res, w, 1e-5), check_fused, 4 * n),
    ]


def silu_case(tokens: int) -> Case:
    x = torch.randn(tokens, 2 * INTER, device=DEV, dtype=DT)
    return Case(f"silu_and_mul T={tokens}", lambda: K.silu_and_mul(x), lambda: R.silu_and_mul_ref(x),
                lambda: _close(K.silu_and_mul(x), R.silu_and_mul_ref(x), "silu_and_mul"), 3 * x.numel())


def rotary_case(tokens: int) -> Case:
    inv = 1.0 / (500000 ** (torch.arange(0, D, 2, device=DEV, dtype=torch.float32) / D))
    freqs = torch.outer(torch.arange(8192, device=DEV, dtype=torch.float32), inv)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    pos = torch.randint(0, 8192, (tokens,), device=DEV)
    qkv = torch.randn(tokens, (HQ + 2 * HKV) * D, device=DEV, dtype=DT)
    q, k = qkv[:, :HQ * D], qkv[:, HQ * D:(HQ + HKV) * D]

    def check() -> None:
        a, b = qkv.clone(), qkv.clone()
        K.apply_rotary_pos_emb_(pos, a[:, :HQ * D], a[:, HQ * D:(HQ + HKV) * D], D, cache, True)
        qr, kr = b[:, :HQ * D].clone(), b[:, HQ * D:(HQ + HKV) * D].clone()
        R.apply_rotary_pos_emb_ref_(pos, qr, kr, D, cache, True)
        _close(a[:, :(HQ + HKV) * D], torch.cat((qr, kr), 1), "rotary")

    return Case(f"rotary T={tokens}", lambda: K.apply_rotary_pos_emb_(pos, q, k, D, cache, True),
                lambda: R.apply_rotary_pos_emb_ref_(pos, q.clone(), k.clone(), D, cache, True), check,
                2 * tokens * (HQ + HKV) * D * 2)


def store_kv_case(tokens: int) -> Case:
    kb = torch.zeros(65536, HKV, D, device=DEV, dtype=DT)
    vb = torch.zeros_like(kb)
    loc = torch.randperm(65535, device=DEV)[:tokens] + 1
    k = torch.randn(tokens, HKV, D, device=DEV, dtype=DT)
    v = torch.randn_like(k)

    def check() -> None:
        K.store_kv_cache(kb, vb, loc, k, v)
        assert torch.equal(kb[loc], k) and torch.equal(vb[loc], v), "store_kv_cache"

    return Case(f"store_kv_cache T={tokens}", lambda: K.store_kv_cache(kb, vb, loc, k, v),
                lambda: R.store_kv_cache_ref(kb, vb, loc, k, v), check, 4 * k.numel() * 2)


def _kv_pool(bs: int, ctx: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    slots = bs * ctx + 1
    kb = torch.randn(slots, HKV, D, device=DEV, dtype=DT)
    vb = torch.randn_like(kb)
    req_to_token = (torch.randperm(slots - 1, device=DEV) + 1).int().view(bs, ctx)
    return kb, vb, req_to_token, torch.arange(bs, device=DEV), torch.full((bs,), ctx, device=DEV)


def _decode_sdpa(q: torch.Tensor, kb: torch.Tensor, vb: torch.Tensor, r2t: torch.Tensor, rows: torch.Tensor,
                 ctx: int, scale: float) -> torch.Tensor:
    """The torch_native decode: gather every context into a padded batch, one SDPA."""
    slots = r2t[rows, :ctx].long()
    k, v = kb[slots].transpose(1, 2), vb[slots].transpose(1, 2)
    return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, scale=scale, enable_gqa=True).squeeze(2)


def decode_case(bs: int, ctx: int) -> Case:
    kb, vb, r2t, rows, lens = _kv_pool(bs, ctx)
    q = torch.randn(bs, HQ, D, device=DEV, dtype=DT)
    o = torch.empty_like(q)
    splits = K.compute_num_kv_splits(lens, HKV, MAX_KV_SPLITS)
    logits = torch.empty(bs, HQ, MAX_KV_SPLITS, D, device=DEV, dtype=torch.float32)
    lse = torch.empty(bs, HQ, MAX_KV_SPLITS, device=DEV, dtype=torch.float32)
    scale = D ** -0.5

    def run() -> None:
        K.decode_attention_fwd(q, kb, vb, o, r2t, rows, lens, splits, scale, MAX_KV_SPLITS, logits, lse)

    def check() -> None:
        run()
        ref = torch.empty_like(q)
        R.decode_attention_ref(q, kb, vb, ref, r2t, rows, lens, scale)
        _close(o, ref, "decode_attention")

    return Case(f"decode_attention bs={bs} ctx={ctx} splits={splits[0].item()}", run,
                lambda: _decode_sdpa(q, kb, vb, r2t, rows, ctx, scale), check, 2 * bs * ctx * HKV * D * 2)


def extend_case(bs: int, prefix: int, new: int) -> Case:
    kb, vb, r2t, rows, _ = _kv_pool(bs, prefix + new)
    lens = torch.full((bs,), prefix + new, device=DEV)
    ext = torch.full((bs,), new, device=DEV)
    start = torch.arange(bs, device=DEV) * new
    q = torch.randn(bs * new, HQ, D, device=DEV, dtype=DT)
    k = torch.randn(bs * new, HKV, D, device=DEV, dtype=DT)
    v = torch.randn_like(k)
    o = torch.empty_like(q)
    args = (r2t, rows, lens, ext, start)
    run = lambda: K.extend_attention_fwd(q, k, v, o, kb, vb, *args, new, D ** -0.5)  # noqa: E731
    ref = lambda: R.extend_attention_ref(q, k, v, torch.empty_like(q), kb, vb, *args, D ** -0.5)  # noqa: E731

    def check() -> None:
        run()
        out = torch.empty_like(q)
        R.extend_attention_ref(q, k, v, out, kb, vb, *args, D ** -0.5)
        _close(o, out, "extend_attention")

    flops = 4 * bs * HQ * D * new * (prefix + new / 2)  # QK^T and PV over the unmasked half
    return Case(f"extend_attention bs={bs} prefix={prefix} new={new} (TFLOP/s)", run, ref, check,
                int(flops / 1000), ref_graph=False)  # shown as TFLOP/s: flops / 1e3 / ms / 1e6


def sampling_case(bs: int) -> Case:
    probs = torch.softmax(3 * torch.randn(bs, VOCAB, device=DEV), dim=-1)
    top_ks = torch.full((bs,), 50, device=DEV)
    top_ps = torch.full((bs,), 0.9, device=DEV)
    min_ps = torch.full((bs,), 0.01, device=DEV)
    seeds = torch.arange(bs, device=DEV) * 7919
    steps = torch.full((bs,), 3, device=DEV)
    args = (probs, top_ks, top_ps, min_ps, seeds, steps)

    def check() -> None:
        got, want = K.top_k_top_p_min_p_sampling(*args), R.top_k_top_p_min_p_sampling_ref(*args)
        assert torch.equal(got, want), f"sampling: {got.tolist()} != {want.tolist()}"

    return Case(f"sampling bs={bs} vocab={VOCAB}", lambda: K.top_k_top_p_min_p_sampling(*args),
                lambda: R.top_k_top_p_min_p_sampling_ref(*args), check, probs.numel() * 4)


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for t in (1, 64, 2048):
        cases += norm_cases(t) + [silu_case(t), rotary_case(t), store_kv_case(t)]
    cases += [decode_case(bs, ctx) for bs in (1, 64) for ctx in (512, 4096)]
    cases += [extend_case(1, 0, 2048), extend_case(4, 1024, 512)]
    cases += [sampling_case(bs) for bs in (1, 64)]
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated name prefixes to run")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_kernels needs CUDA (the CPU runs the kernels only under TRITON_INTERPRET, for tests)")
    torch.manual_seed(0)
    commit = git_commit(__file__)
    print(f"# bench_kernels: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
          f"{triton.__version__}, commit {commit or '?'}, bf16, Llama-3.1-8B shapes")
    rows = []
    for case in all_cases():
        if args.only and not any(case.name.startswith(p) for p in args.only.split(",")):
            continue
        try:
            case.check()
            status = "ok"
        except AssertionError as err:
            status = f"MISMATCH ({str(err).splitlines()[0][:60]})"
        t_k, t_eager = _median_ms(case.kernel, graph=True), _median_ms(case.kernel, graph=False)
        t_r = _median_ms(case.torch_ref, graph=case.ref_graph)
        rows.append((case.name, t_k * 1e3, t_eager * 1e3, t_r * 1e3, case.bytes_moved / t_k / 1e6, t_r / t_k, status))
    print("kernel = in a CUDA graph (GPU time); eager = launched from Python (adds launch overhead); torch = the "
          "reference, in a graph where it can be captured; GB/s from the graph time; ceiling 4280 GB/s")
    print(f"{'case':52} {'kernel us':>10} {'eager us':>9} {'torch us':>10} {'GB/s':>7} {'speedup':>8}  check")
    for name, tk, te, tr, gbs, sp, status in rows:
        print(f"{name:52} {tk:10.1f} {te:9.1f} {tr:10.1f} {gbs:7.0f} {sp:7.1f}x  {status}")


if __name__ == "__main__":
    main()
