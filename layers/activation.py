"""SiLU-and-mul: `silu(x[..., :d]) * x[..., d:]` for the fused gate-up projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.layers.kernel_dispatch import kernel_for


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = kernel_for(x)
        if kernel is not None and x.dim() == 2 and x.is_contiguous():
            return kernel.silu_and_mul(x)
        return self.forward_native(x)

    @staticmethod
    def forward_native(x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]
