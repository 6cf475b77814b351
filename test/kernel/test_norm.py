"""rmsnorm and fused_add_rmsnorm against their references."""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import fused_add_rmsnorm, rmsnorm
from radixlm_kernel.reference import fused_add_rmsnorm_ref, rmsnorm_ref


@pytest.mark.parametrize("tokens,hidden", [(1, 64), (7, 200), (3, 4096)])
def test_rmsnorm(device: str, dtype: torch.dtype, tol: dict, tokens: int, hidden: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(tokens, hidden, device=device, dtype=dtype)
    w = (1 + 0.1 * torch.randn(hidden, device=device)).to(dtype)
    torch.testing.assert_close(rmsnorm(x, w, 1e-6), rmsnorm_ref(x, w, 1e-6), **tol)


@pytest.mark.parametrize("tokens,hidden", [(1, 64), (5, 96), (2, 4096)])
def test_fused_add_rmsnorm(device: str, dtype: torch.dtype, tol: dict, tokens: int, hidden: int) -> None:
    torch.manual_seed(1)
    x = torch.randn(tokens, hidden, device=device, dtype=dtype)
    res = torch.randn(tokens, hidden, device=device, dtype=dtype)
    w = (1 + 0.1 * torch.randn(hidden, device=device)).to(dtype)
    x_ref, res_ref = x.clone(), res.clone()
    fused_add_rmsnorm(x, res, w, 1e-5)
    fused_add_rmsnorm_ref(x_ref, res_ref, w, 1e-5)
    torch.testing.assert_close(res, res_ref, **tol)
    torch.testing.assert_close(x, x_ref, **tol)


def test_rmsnorm_strided_rows(device: str, dtype: torch.dtype, tol: dict) -> None:
    x = torch.randn(4, 256, device=device, dtype=dtype)[:, :128]
    w = torch.ones(128, device=device, dtype=dtype)
    torch.testing.assert_close(rmsnorm(x, w, 1e-6), rmsnorm_ref(x, w, 1e-6), **tol)
