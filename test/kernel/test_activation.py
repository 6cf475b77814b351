"""silu_and_mul against its reference."""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import silu_and_mul
from radixlm_kernel.reference import silu_and_mul_ref


@pytest.mark.parametrize("tokens,inter", [(1, 16), (6, 200), (3, 2100)])
def test_silu_and_mul(device: str, dtype: torch.dtype, tol: dict, tokens: int, inter: int) -> None:
    torch.manual_seed(0)
    x = 3 * torch.randn(tokens, 2 * inter, device=device, dtype=dtype)
    out = silu_and_mul(x)
    assert out.shape == (tokens, inter)
    torch.testing.assert_close(out, silu_and_mul_ref(x), **tol)
