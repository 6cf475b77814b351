"""Prefill attention on the GPU: our Triton extend kernel against PyTorch's SDPA backends (CUDA only).

    python benchmark/gpu_prefill_attention.py                  # Llama-3.1-8B heads (32 q, 8 kv, dim 128)
    python benchmark/gpu_prefill_attention.py --cases 1x0x2048,1x2048x2048

A case `REQSxPREFIXxNEW` is REQS requests, each with PREFIX cached tokens (slots in a real-sized
pool, read through `req_to_token`) and NEW new tokens (causal among themselves). The Triton kernel
reads the prefix from the pool; an SDPA variant first gathers each request's prefix K/V out of the
pool into one contiguous tensor with the new K/V (timed with it), then runs one SDPA call per
request with the causal mask aligned to the bottom right. Every variant is checked against the
Triton kernel's output, then timed (`triton.testing.do_bench`, median ms). TFLOP/s count the
unmasked half of the causal part plus the prefix.
"""

from __future__ import annotations

import argparse
from typing import Callable, Optional

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import radixlm_kernel as K

HQ, HKV, D = 32, 8, 128
DEV, DT = "cuda", torch.bfloat16
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def make_case(reqs: int, prefix: int, new: int) -> dict:
    """Pool, rows and new-token q/k/v for `reqs` requests of `prefix` cached + `new` new tokens."""
    pool_slots = max(200_000, reqs * (prefix + new) + 1)
    kb = torch.randn(pool_slots, HKV, D, device=DEV, dtype=DT)
    vb = torch.randn_like(kb)
    perm = torch.randperm(pool_slots - 1, device=DEV)[:reqs * (prefix + new)] + 1
    r2t = perm.view(reqs, prefix + new).to(torch.int32)
    t = reqs * new
    q, k, v = (torch.randn(t, h, D, device=DEV, dtype=DT) for h in (HQ, HKV, HKV))
    # the new tokens' K/V sit in the pool too (the backend stores them before attending)
    new_slots = r2t[:, prefix:].reshape(-1).long()
    kb[new_slots], vb[new_slots] = k, v
    return dict(reqs=reqs, prefix=prefix, new=new, kb=kb, vb=vb, r2t=r2t, q=q, k=k, v=v,
                rows=torch.arange(reqs, device=DEV), lens=torch.full((reqs,), prefix + new, device=DEV),
                ext=torch.full((reqs,), new, device=DEV), start=torch.arange(reqs, device=DEV) * new)


def triton_fn(c: dict, o: torch.Tensor) -> Callable[[], None]:
    return lambda: K.extend_attention_fwd(c["q"], c["k"], c["v"], o, c["kb"], c["vb"], c["r2t"], c["rows"], c["lens"],
                                          c["ext"], c["start"], c["new"], D ** -0.5)


def sdpa_fn(c: dict, o: torch.Tensor, backend: Optional[SDPBackend], gqa: bool) -> Callable[[], None]:
    """One SDPA call per request; `gqa`: `enable_gqa=True`, else K/V heads repeated first (timed)."""
    new, prefix = c["new"], c["prefix"]

    def run() -> None:
        for i in range(c["reqs"]):
            qi = c["q"][i * new:(i + 1) * new].transpose(0, 1).unsqueeze(0)  # [1, Hq, new, D] (a view)
            if prefix:
                slots = c["r2t"][i].long()
                ki = c["kb"].index_select(0, slots).transpose(0, 1).unsqueeze(0)
                vi = c["vb"].index_select(0, slots).transpose(0, 1).unsqueeze(0)
                mask = causal_lower_right(new, prefix + new)
            else:
                ki = c["k"][i * new:(i + 1) * new].transpose(0, 1).unsqueeze(0)
                vi = c["v"][i * new:(i + 1) * new].transpose(0, 1).unsqueeze(0)
                mask = None
            if not gqa:
                ki, vi = ki.repeat_interleave(HQ // HKV, dim=1), vi.repeat_interleave(HQ // HKV, dim=1)
            kwargs = dict(enable_gqa=True) if gqa else {}
            if mask is None:
                oi = F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, scale=D ** -0.5, **kwargs)
            else:
                oi = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=D ** -0.5, **kwargs)
            o[i * new:(i + 1) * new] = oi[0].transpose(0, 1)

    if backend is None:
        return run

    def forced() -> None:
        with sdpa_kernel([backend]):
            run()
    return forced


def run_case(spec: str) -> list[str]:
    reqs, prefix, new = (int(x) for x in spec.split("x"))
    c = make_case(reqs, prefix, new)
    flops = 4 * reqs * HQ * D * new * (prefix + new / 2)
    ref = torch.empty_like(c["q"])
    fns = {"triton": (triton_fn(c, ref), ref)}
    for gqa in (True, False):
        for name, backend in [("default", None), *BACKENDS.items()]:
            o = torch.empty_like(c["q"])
            fns[f"sdpa-{name}{'' if gqa else '-repeat'}"] = (sdpa_fn(c, o, backend, gqa), o)
    row = []
    for name, (fn, out) in fns.items():
        try:
            fn()
            torch.cuda.synchronize()
            if name != "triton":
                err = (out.float() - ref.float()).abs().max().item()
                if err > 3e-2:
                    row.append(f"{name}: MISMATCH {err:.2e}")
                    continue
            ms = triton.testing.do_bench(fn, warmup=5, rep=50)
            row.append(f"{name}: {ms:.3f} ms ({flops / ms / 1e9:.0f} TFLOP/s)")
        except Exception as e:  # noqa: BLE001 - a backend that cannot run this case is named in the table
            row.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
    del c
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="1x0x512,1x0x1024,1x0x2048,1x0x4096,4x0x2048,1x0x8192,1x2048x2048")
    args = parser.parse_args()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, cudnn {torch.backends.cudnn.version()}")
    print("| reqs x (prefix + new) | variant: median ms (TFLOP/s) |")
    print("|---|---|")
    for spec in args.cases.split(","):
        for cell in run_case(spec):
            print(f"| {spec} | {cell} |", flush=True)


if __name__ == "__main__":
    main()
