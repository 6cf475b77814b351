"""SiLU-and-mul: `silu(x[..., :d]) * x[..., d:]` for the fused gate-up projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.layers.kernel_dispatch import kernel_for


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    kernel = kernel_for(x)
    if kernel is not None and x.dim() == 2 and x.is_contiguous():
        return kernel.silu_and_mul(x)
    return silu_and_mul_native(x)


def silu_and_mul_native(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


class SiluAndMul(nn.Module):
    forward_native = staticmethod(silu_and_mul_native)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)
