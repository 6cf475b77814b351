"""Whether a layer should call the project's Triton kernels (`radixlm_kernel`, from sgl-kernel/).

Only CUDA tensors use them, and only when the package imports; the CPU always takes the
pure-torch path, which is also the reference the kernels are tested against.
"""

from __future__ import annotations

import logging
import time
from types import ModuleType
from typing import Optional

import torch

from radixlm import environ

try:
    import radixlm_kernel as _kernel
    from radixlm_kernel import cuda_gemv as _cuda_gemv
except ImportError:  # not built or no Triton: every layer falls back to torch
    _kernel = _cuda_gemv = None

logger = logging.getLogger(__name__)

# Batches of at most this many tokens take the fused GEMV kernels (`radixlm_kernel.gemv`: the RMSNorm or
# SiLU-and-mul before a projection folded into it, M <= 16); set from benchmark/gpu_gemv_sweep.py on an
# H200; 0 disables. RADIXLM_FUSED_GEMV_MAX_TOKENS overrides it.
FUSED_GEMV_MAX_TOKENS = min(16, environ.fused_gemv_max_tokens(0))
# bf16 batches of at most this many tokens take the CUDA C++ GEMVs (`radixlm_kernel.cuda_gemv`, same entry
# points, M <= 8) ahead of the Triton ones; RADIXLM_CUDA_GEMV_MAX_TOKENS=N overrides it, 0 keeps cuBLAS. On
# the H200 (RESULTS.md, fifteenth session) the bs-1 graph took 4.381 ms with them, launched with
# programmatic dependent launch so that each starts loading its weights while the kernel before it ends,
# against 4.547 ms with cuBLAS and the separate norm / SiLU kernels; at M >= 2 their CUDA-core FMAs lose.
CUDA_GEMV_MAX_TOKENS = environ.cuda_gemv_max_tokens(1)
# Which projections (the layers' `gemv_op`) take them; RADIXLM_CUDA_GEMV_OPS overrides it.
CUDA_GEMV_OPS = environ.cuda_gemv_ops(",".join(environ.CUDA_GEMV_OP_NAMES))
_cuda_gemv_ready = False


def prepare_cuda_gemv(dtype: torch.dtype) -> bool:
    """Build or load the CUDA GEMV extension before any forward (never inside a graph capture). Without a
    compiler it logs why and the layers keep cuBLAS. Returns whether the CUDA GEMVs are on."""
    global _cuda_gemv_ready
    if _cuda_gemv is None or CUDA_GEMV_MAX_TOKENS == 0 or dtype != torch.bfloat16 or not torch.cuda.is_available():
        return False
    t0 = time.perf_counter()
    ext = _cuda_gemv.load()
    if ext is None:
        logger.warning("CUDA GEMV extension unavailable, small batches use cuBLAS: %s", _cuda_gemv.load_error)
        return False
    logger.info("CUDA GEMVs for %s in batches of <= %d tokens (extension ready in %.1f s)",
                ",".join(sorted(CUDA_GEMV_OPS)), CUDA_GEMV_MAX_TOKENS, time.perf_counter() - t0)
    _cuda_gemv_ready = True
    return True


def kernel_for(x: torch.Tensor) -> Optional[ModuleType]:
    """The kernel module when `x` lives on CUDA and the kernels are installed, else None."""
    return _kernel if (_kernel is not None and x.is_cuda) else None


def gemv_kernel_for(x: torch.Tensor, weight: torch.Tensor, op: str = "") -> Optional[ModuleType]:
    """The module whose `linear_gemv` / `rmsnorm_gemv` / `silu_mul_gemv` take `x` (`[tokens, features]` on
    CUDA) against `weight`: the CUDA C++ GEMVs (bf16, at most `CUDA_GEMV_MAX_TOKENS` tokens, once
    `prepare_cuda_gemv` has loaded them, for a projection `op` in `CUDA_GEMV_OPS` or unnamed), else the
    Triton ones (at most `FUSED_GEMV_MAX_TOKENS` tokens), else None (the caller uses cuBLAS)."""
    kernel = kernel_for(x)
    if kernel is None or x.dim() != 2 or x.stride(-1) != 1 or x.shape[0] == 0:
        return None
    if (_cuda_gemv_ready and x.shape[0] <= CUDA_GEMV_MAX_TOKENS and (not op or op in CUDA_GEMV_OPS)
            and _cuda_gemv.supports(x, weight)):
        return _cuda_gemv
    return kernel if x.shape[0] <= FUSED_GEMV_MAX_TOKENS else None
