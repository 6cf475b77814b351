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
    check_inputs(x, w, config, warps)
    return ext.gemv(x, w, config, warps)


def check_inputs(x: torch.Tensor, w: torch.Tensor, config: int, warps: int) -> None:
    """ValueError naming the parameter for what the kernel cannot take. The extension's own TORCH_CHECKs
    are a backstop only: on the H200 image an exception thrown inside the JIT-built module crashed the
    process (a segfault in the sixth session's device run) instead of reaching Python."""
    for name, t in (("x", x), ("w", w)):
        if not t.is_cuda or t.dtype != torch.bfloat16 or t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D bfloat16 CUDA tensor, got {t.dtype} {tuple(t.shape)} "
                             f"on {t.device}")
        if t.stride(1) != 1 or t.data_ptr() % 16:
            raise ValueError(f"{name} must have a unit last stride and a 16-byte aligned start")
    if not 1 <= x.shape[0] <= MAX_M:
        raise ValueError(f"x must have 1 to {MAX_M} rows, got {x.shape[0]}")
    if x.shape[1] != w.shape[1] or w.shape[1] % 8 or x.stride(0) % 8 or w.stride(0) != w.shape[1]:
        raise ValueError(f"x {tuple(x.shape)} and w {tuple(w.shape)} need one K, a multiple of 8, and "
                         f"16-byte aligned rows (w contiguous)")
    if config not in CONFIGS:
        raise ValueError(f"config must be one of {sorted(CONFIGS)}, got {config}")
    if warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"warps must be 1, 2, 4, 8 or 16, got {warps}")
