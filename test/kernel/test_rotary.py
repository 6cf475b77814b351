"""apply_rotary_pos_emb_ against its reference: NeoX and interleaved, full and partial rotary dims."""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import apply_rotary_pos_emb_
from radixlm_kernel.reference import apply_rotary_pos_emb_ref_


def _cache(max_pos: int, rotary_dim: int, device: str) -> torch.Tensor:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(device)


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("tokens,hq,hk,head_size,rotary_dim", [(5, 4, 1, 64, 64), (3, 8, 2, 128, 128),
                                                                (4, 2, 2, 96, 32)])
def test_rotary(device: str, dtype: torch.dtype, tol: dict, is_neox: bool, tokens: int, hq: int, hk: int,
                head_size: int, rotary_dim: int) -> None:
    torch.manual_seed(0)
    cache = _cache(4096, rotary_dim, device)
    positions = torch.randint(0, 4096, (tokens,), device=device)
    q = torch.randn(tokens, hq * head_size, device=device, dtype=dtype)
    k = torch.randn(tokens, hk * head_size, device=device, dtype=dtype)
    q_ref, k_ref = q.clone(), k.clone()
    apply_rotary_pos_emb_(positions, q, k, head_size, cache, is_neox)
    apply_rotary_pos_emb_ref_(positions, q_ref, k_ref, head_size, cache, is_neox)
    torch.testing.assert_close(q, q_ref, **tol)
    torch.testing.assert_close(k, k_ref, **tol)


def test_rotary_on_fused_qkv_slices(device: str, dtype: torch.dtype, tol: dict) -> None:
    """q and k as column slices of one qkv tensor (strided rows), as a fused projection produces."""
    torch.manual_seed(1)
    hq, hk, d = 4, 2, 64
    qkv = torch.randn(6, (hq + 2 * hk) * d, device=device, dtype=dtype)
    ref = qkv.clone()
    q, k = qkv[:, :hq * d], qkv[:, hq * d:(hq + hk) * d]
    positions = torch.arange(6, device=device) * 7
    cache = _cache(64, d, device)
    apply_rotary_pos_emb_(positions, q, k, d, cache, True)
    q_ref, k_ref = ref[:, :hq * d].clone(), ref[:, hq * d:(hq + hk) * d].clone()
    apply_rotary_pos_emb_ref_(positions, q_ref, k_ref, d, cache, True)
    torch.testing.assert_close(qkv[:, :hq * d], q_ref, **tol)
    torch.testing.assert_close(qkv[:, hq * d:(hq + hk) * d], k_ref, **tol)
    torch.testing.assert_close(qkv[:, (hq + hk) * d:], ref[:, (hq + hk) * d:], atol=0, rtol=0)
