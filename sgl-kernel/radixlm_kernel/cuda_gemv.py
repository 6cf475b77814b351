"""A CUDA C++ small-batch bf16 GEMV (`csrc/gemv.cu`), built on first use with torch's JIT extension loader.

Triton's GEMVs (`gemv.py`) could not keep enough weight loads in flight to beat cuBLAS at M <= 8;
this one issues 16-byte streaming loads, `UNROLL` chunks of `ROWS` rows per lane, with no split-K.
`load()` returns None (and remembers why) where there is no CUDA or no compiler, so callers fall back
to `F.linear`. The build lands in torch's extension folder (TORCH_EXTENSIONS_DIR sets it).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Optional

import torch

SOURCE = os.path.join(os.path.dirname(__file__), "csrc", "gemv.cu")
CONFIGS = {0: (2, 2), 1: (4, 2), 2: (2, 4), 3: (1, 4), 4: (4, 1)}  # config id -> (ROWS, UNROLL)
MAX_M = 8

_ext: Optional[ModuleType] = None
load_error: Optional[str] = None


def load() -> Optional[ModuleType]:
    """The built extension, or None where it cannot be built (`load_error` says why)."""
    global _ext, load_error
    if _ext is not None or load_error is not None:
        return _ext
    if not torch.cuda.is_available():
        load_error = "no CUDA device"
        return None
    try:
        from torch.utils.cpp_extension import load as load_extension

        major, minor = torch.cuda.get_device_capability()
        arch = f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"
        _ext = load_extension(name="radixlm_gemv", sources=[SOURCE], extra_cuda_cflags=["-O3", arch], verbose=False)
    except Exception as e:  # noqa: BLE001 - no nvcc / ninja: the caller falls back to cuBLAS
        load_error = f"{type(e).__name__}: {e}"
    return _ext


def gemv(x: torch.Tensor, w: torch.Tensor, config: int = 0, warps: int = 4) -> torch.Tensor:
    """`x @ w.T` for bf16 `x [M <= 8, K]`, `w [N, K]` (K a multiple of 8, rows 16-byte aligned)."""
    ext = load()
    if ext is None:
        raise RuntimeError(f"the CUDA GEMV extension is unavailable: {load_error}")
    return ext.gemv(x, w, config, warps)
