"""The CUDA C++ small-batch GEMV (`radixlm_kernel.cuda_gemv`): against an fp32 matmul on the GPU, with odd
output sizes (row tails) and every launch config; where it cannot be built, a clear error."""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import cuda_gemv

HAS_CUDA = torch.cuda.is_available()


@pytest.mark.skipif(HAS_CUDA, reason="the no-CUDA path")
def test_unavailable_without_cuda() -> None:
    assert cuda_gemv.load() is None and cuda_gemv.load_error == "no CUDA device"
    with pytest.raises(RuntimeError, match="CUDA GEMV extension is unavailable: no CUDA device"):
        cuda_gemv.gemv(torch.zeros(1, 8, dtype=torch.bfloat16), torch.zeros(8, 8, dtype=torch.bfloat16))


@pytest.fixture(scope="module")
def ext() -> object:
    if not HAS_CUDA:
        pytest.skip("no CUDA device")
    module = cuda_gemv.load()
    if module is None:
        pytest.skip(f"extension not buildable here: {cuda_gemv.load_error}")
    return module


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("n,k", [(1000, 4096), (4096, 14336), (37, 256)])
def test_matches_fp32_matmul(ext: object, m: int, n: int, k: int) -> None:
    torch.manual_seed(m * n)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    ref = x.float() @ w.float().T
    for config in cuda_gemv.CONFIGS:
        for warps in (4, 8):
            y = cuda_gemv.gemv(x, w, config, warps)
            assert y.shape == (m, n) and y.dtype == torch.bfloat16
            torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)


def test_rejects_bad_input(ext: object) -> None:
    """Checked in Python before the launch, each error naming the parameter; the call after them works."""
    w = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 256, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="x must have 1 to 8 rows, got 9"):
        cuda_gemv.gemv(torch.randn(9, 256, device="cuda", dtype=torch.bfloat16), w)
    with pytest.raises(ValueError, match="x must be a 2-D bfloat16 CUDA tensor"):
        cuda_gemv.gemv(torch.randn(1, 256, device="cuda"), w)
    with pytest.raises(ValueError, match="need one K"):
        cuda_gemv.gemv(torch.randn(1, 128, device="cuda", dtype=torch.bfloat16), w)
    with pytest.raises(ValueError, match="config must be one of"):
        cuda_gemv.gemv(x, w, config=7)
    with pytest.raises(ValueError, match="warps must be"):
        cuda_gemv.gemv(x, w, warps=0)
    torch.testing.assert_close(cuda_gemv.gemv(x, w).float(), x.float() @ w.float().T, atol=2e-2, rtol=2e-2)
