"""Weight loaders shared by layers: every parameter carries `weight_loader(param, loaded_weight, shard_id=None)`."""

from __future__ import annotations

import torch
from torch import nn


def check_shape(param_desc: str, expected: tuple[int, ...], loaded_weight: torch.Tensor) -> None:
    if tuple(loaded_weight.shape) != tuple(expected):
        raise ValueError(f"{param_desc}: expected checkpoint shape {tuple(expected)}, "
                         f"got {tuple(loaded_weight.shape)}")


def default_weight_loader(param: nn.Parameter, loaded_weight: torch.Tensor, shard_id: object = None) -> None:
    """Copy a whole, unsharded tensor; ValueError on a shape mismatch or an unexpected shard id."""
    if shard_id is not None:
        raise ValueError(f"parameter of shape {tuple(param.shape)} is not packed; got shard {shard_id!r}")
    check_shape("parameter", tuple(param.shape), loaded_weight)
    param.data.copy_(loaded_weight)

