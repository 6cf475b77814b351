"""The small-M GEMV kernels (plain, add + RMSNorm prologue, SiLU-and-mul prologue) against their references,
in both inner-product styles, at N and K that are not multiples of the blocks."""

from __future__ import annotations

from typing import Optional

import pytest
import torch

from radixlm_kernel import gemv as G
from radixlm_kernel import linear_gemv, rmsnorm_gemv, silu_mul_gemv
from radixlm_kernel.reference import linear_gemv_ref, rmsnorm_gemv_ref, silu_mul_gemv_ref

N, K = 37, 200  # 3 blocks of 16 rows (the last one partial), 4 steps of 64 (the last one partial)


@pytest.fixture(params=[False, True], ids=["fma", "dot"])
def style(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Every M bucket launches with small blocks of the given inner-product style."""
    cfg = G.GemvConfig(request.param, 16, 64, 4, 2)
    monkeypatch.setattr(G, "CONFIGS", {b: cfg for b in (1, 2, 4, 8, 16)})
    monkeypatch.setattr(G, "SHAPE_CONFIGS", {})
    return request.param


def _inputs(m: int, device: str, dtype: torch.dtype, k: int = K, seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return {"x": torch.randn(m, k, device=device, dtype=dtype),
            "residual": torch.randn(m, k, device=device, dtype=dtype),
            "w": (torch.randn(N, k, device=device) / k ** 0.5).to(dtype),
            "bias": torch.randn(N, device=device, dtype=dtype),
            "g": (1 + 0.1 * torch.randn(k, device=device)).to(dtype)}


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("with_bias,out_dtype", [(False, None), (True, torch.float32)], ids=["plain", "bias-fp32"])
def test_linear_gemv(device: str, dtype: torch.dtype, tol: dict, style: bool, m: int, with_bias: bool,
                     out_dtype: Optional[torch.dtype]) -> None:
    t = _inputs(m, device, dtype)
    bias = t["bias"] if with_bias else None
    y = linear_gemv(t["x"], t["w"], bias, out_dtype=out_dtype)
    assert y.dtype == (out_dtype or dtype) and y.shape == (m, N)
    torch.testing.assert_close(y, linear_gemv_ref(t["x"], t["w"], bias, out_dtype), **tol)


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("case", ["add-store", "add-nostore-fp32", "norm-only-bias"])
def test_rmsnorm_gemv(device: str, dtype: torch.dtype, tol: dict, style: bool, m: int, case: str) -> None:
    t = _inputs(m, device, dtype, seed=1)
    residual = None if case == "norm-only-bias" else t["residual"]
    bias = t["bias"] if case == "norm-only-bias" else None
    out_dtype = torch.float32 if case == "add-nostore-fp32" else None
    before = None if residual is None else residual.clone()
    y, h = rmsnorm_gemv(t["x"], residual, t["g"], 1e-5, t["w"], bias, store_residual=case == "add-store",
                        out_dtype=out_dtype)
    want_y, want_h = rmsnorm_gemv_ref(t["x"], residual, t["g"], 1e-5, t["w"], bias, out_dtype)
    torch.testing.assert_close(y, want_y, **tol)
    if case == "add-store":
        torch.testing.assert_close(h, want_h, **tol)
        assert torch.equal(residual, before)  # the new residual is a separate buffer
    elif case == "add-nostore-fp32":
        assert h is None
    else:
        assert h is t["x"]


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("with_bias", [False, True], ids=["plain", "bias"])
def test_silu_mul_gemv(device: str, dtype: torch.dtype, tol: dict, style: bool, m: int, with_bias: bool) -> None:
    t = _inputs(m, device, dtype, seed=2)
    gate_up = 2 * torch.randn(m, 2 * K, device=device, dtype=dtype)
    bias = t["bias"] if with_bias else None
    torch.testing.assert_close(silu_mul_gemv(gate_up, t["w"], bias), silu_mul_gemv_ref(gate_up, t["w"], bias), **tol)


def test_default_configs_even_k_and_strided_rows(device: str, dtype: torch.dtype, tol: dict) -> None:
    """The shipped tables at every M bucket; K a multiple of the block (the unmasked loop); x a row slice."""
    for m in (1, 2, 4, 5, 16):
        t = _inputs(m, device, dtype, k=512, seed=m)
        x = torch.cat([t["x"], t["x"]], dim=1)[:, :512]  # row stride 1024
        y, h = rmsnorm_gemv(x, t["residual"], t["g"], 1e-6, t["w"])
        want_y, want_h = rmsnorm_gemv_ref(x, t["residual"], t["g"], 1e-6, t["w"])
        torch.testing.assert_close(y, want_y, **tol)
        torch.testing.assert_close(h, want_h, **tol)
        torch.testing.assert_close(linear_gemv(x, t["w"]), linear_gemv_ref(x, t["w"]), **tol)


def test_rejects_bad_shapes(device: str, dtype: torch.dtype) -> None:
    w = torch.zeros(8, 32, device=device, dtype=dtype)
    with pytest.raises(ValueError):
        linear_gemv(torch.zeros(17, 32, device=device, dtype=dtype), w)  # M > 16
    with pytest.raises(ValueError):
        linear_gemv(torch.zeros(2, 31, device=device, dtype=dtype), w)  # K mismatch
    with pytest.raises(ValueError):
        silu_mul_gemv(torch.zeros(2, 63, device=device, dtype=dtype), w)  # odd gate_up
    assert linear_gemv(torch.zeros(0, 32, device=device, dtype=dtype), w).shape == (0, 8)
