"""Whether a layer should call the project's Triton kernels (`radixlm_kernel`, from sgl-kernel/).

Only CUDA tensors use them, and only when the package imports; the CPU always takes the
pure-torch path, which is also the reference the kernels are tested against.
"""

from __future__ import annotations

from types import ModuleType
from typing import Optional

import torch

try:
    import radixlm_kernel as _kernel
except ImportError:  # not built or no Triton: every layer falls back to torch
    _kernel = None


def kernel_for(x: torch.Tensor) -> Optional[ModuleType]:
    """The kernel module when `x` lives on CUDA and the kernels are installed, else None."""
    return _kernel if (_kernel is not None and x.is_cuda) else None
