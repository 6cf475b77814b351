"""RMSNorm, with a fused residual-add variant (`forward(x, residual)`)."""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import nn

from radixlm.layers.kernel_dispatch import kernel_for
from radixlm.layers.parameter import default_weight_loader


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.variance_epsilon = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.weight.weight_loader = default_weight_loader

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None
                ) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """`out = rmsnorm(x)`; with `residual`: `new_residual = x + residual`, returns (rmsnorm(new_residual), new_residual)."""
        kernel = kernel_for(x)
        if kernel is not None and x.dim() == 2 and x.is_contiguous():
            if residual is None:
                return kernel.rmsnorm(x, self.weight, self.variance_epsilon)
            # in place: on CUDA `x` and `residual` are overwritten (callers pass temporaries they own)
            kernel.fused_add_rmsnorm(x, residual, self.weight, self.variance_epsilon)
            return x, residual
        if residual is None:
            return self.forward_native(x)
        residual = x + residual
        return self.forward_native(residual), residual

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)

