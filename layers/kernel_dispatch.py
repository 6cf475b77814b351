"""Whether a layer should call the project's Triton kernels (`radixlm_kernel`, from sgl-kernel/).

Only CUDA tensors use them, and only when the package imports; the CPU always takes the
pure-torch path, which is also the reference the kernels are tested against.
"""

from __future__ import annotations

from types import ModuleType
from typing import Optional

import torch

from radixlm import environ

try:
    import radixlm_kernel as _kernel
except ImportError:  # not built or no Triton: every layer falls back to torch
    _kernel = None

# Batches of at most this many tokens take the fused GEMV kernels (`radixlm_kernel.gemv`: the RMSNorm or
# SiLU-and-mul before a projection folded into it, M <= 16); set from benchmark/gpu_gemv_sweep.py on an
# H200; 0 disables. RADIXLM_FUSED_GEMV_MAX_TOKENS overrides it.
FUSED_GEMV_MAX_TOKENS = min(16, environ.fused_gemv_max_tokens(0))


def kernel_for(x: torch.Tensor) -> Optional[ModuleType]:
    """The kernel module when `x` lives on CUDA and the kernels are installed, else None."""
    return _kernel if (_kernel is not None and x.is_cuda) else None


def gemv_kernel_for(x: torch.Tensor) -> Optional[ModuleType]:
    """The kernel module when the fused small-batch GEMV takes `x` (`[tokens, features]`, on CUDA, at most
    `FUSED_GEMV_MAX_TOKENS` tokens, unit last stride), else None."""
    kernel = kernel_for(x)
    if kernel is None or x.dim() != 2 or x.stride(-1) != 1 or not 0 < x.shape[0] <= FUSED_GEMV_MAX_TOKENS:
        return None
    return kernel
