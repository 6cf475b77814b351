"""RMSNorm (plain and fused residual-add) and SiluAndMul against transformers' definitions."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from radixlm.layers.activation import SiluAndMul
from radixlm.layers.layernorm import RMSNorm


def make_norms(hidden: int = 48, eps: float = 1e-5) -> tuple[RMSNorm, LlamaRMSNorm]:
    ours, ref = RMSNorm(hidden, eps), LlamaRMSNorm(hidden, eps)
    w = torch.randn(hidden)
    ours.weight.data.copy_(w)
    ref.weight.data.copy_(w)
    return ours, ref


def test_rmsnorm_matches_transformers_exactly() -> None:
    ours, ref = make_norms()
    x = torch.randn(7, 48)
    assert torch.equal(ours(x), ref(x))


def test_fused_residual_add_returns_new_residual() -> None:
    ours, ref = make_norms()
    x, residual = torch.randn(5, 48), torch.randn(5, 48)
    out, new_residual = ours(x, residual)
    assert torch.equal(new_residual, residual + x)
    assert torch.equal(out, ref(residual + x))


def test_rmsnorm_half_precision_normalises_in_float32() -> None:
    ours, ref = make_norms()
    x = torch.randn(3, 48).to(torch.bfloat16)
    ours, ref = ours.to(torch.bfloat16), ref.to(torch.bfloat16)
    assert torch.equal(ours(x), ref(x))


def test_silu_and_mul() -> None:
    x = torch.randn(4, 2 * 24)
    assert torch.equal(SiluAndMul()(x), F.silu(x[:, :24]) * x[:, 24:])
