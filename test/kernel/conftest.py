"""Kernel tests: the Triton kernels against their pure-torch references.

Without CUDA the kernels run under Triton's interpreter on float32 CPU tensors; the
variable must be set before Triton is first imported, hence here. With CUDA the same
tests run in bfloat16 on the GPU (the CPU variants are skipped: compiled Triton kernels
cannot take CPU tensors).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import radixlm_kernel  # noqa: F401
except ImportError:  # not pip-installed: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sgl-kernel"))

DEVICES = [
    pytest.param("cpu", marks=pytest.mark.skipif(HAS_CUDA, reason="CPU runs use the interpreter; CUDA present")),
    pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")),
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def dtype(device: str) -> torch.dtype:
    """float32 under the interpreter (its bf16 arithmetic is not faithful), bfloat16 on the GPU."""
    return torch.bfloat16 if device == "cuda" else torch.float32


@pytest.fixture
def tol(dtype: torch.dtype) -> dict:
    """assert_close tolerances for outputs in `dtype`."""
    return {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}


@pytest.fixture
def fp8_tol(tol: dict) -> dict:
    """Tolerances for decode over an fp8 pool, which reads K/V up to float16 and rounds q and the
    probabilities there (2^-11, far below the fp8 storage's own error): at least 1e-3."""
    return {k: max(v, 1e-3) for k, v in tol.items()}


@pytest.fixture
def pdl(monkeypatch: pytest.MonkeyPatch):
    """Set RADIXLM_PDL and forget the cached per-device PDL decisions (`radixlm_kernel.utils`), which are
    forgotten again afterwards."""
    from radixlm_kernel import utils

    def set_pdl(on: bool) -> None:
        monkeypatch.setenv("RADIXLM_PDL", "1" if on else "0")
        utils._PDL_CACHE.clear()

    yield set_pdl
    utils._PDL_CACHE.clear()
