"""Tensor-parallel communication: one process group for tensors, one CPU (gloo) group for objects.

With a world size of 1 nothing is initialised and every collective is the identity, so
single-device runs never touch `torch.distributed`. Layers take `tp_rank`/`tp_size`
explicitly (shard math is testable without processes); only the collectives read the
state kept here.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist


@dataclass
class _TPState:
    rank: int = 0
    size: int = 1
    device_group: Optional[Any] = None  # NCCL on CUDA, gloo on CPU
    cpu_group: Optional[Any] = None  # always gloo: Python objects and host-side agreement


_STATE = _TPState()


def init_distributed(tp_rank: int, tp_size: int, backend: str = "gloo",
                     init_method: Optional[str] = None) -> None:
    """Join the tensor-parallel group (`backend` "nccl" on CUDA, "gloo" on CPU); a no-op for size 1."""
    global _STATE
    if tp_size == 1:
        _STATE = _TPState(rank=0, size=1)
        return
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, init_method=init_method or "env://",
                                world_size=tp_size, rank=tp_rank)
    ranks = list(range(tp_size))
    device_group = dist.new_group(ranks, backend=backend)
    cpu_group = device_group if backend == "gloo" else dist.new_group(ranks, backend="gloo")
    _STATE = _TPState(rank=tp_rank, size=tp_size, device_group=device_group, cpu_group=cpu_group)


def destroy_distributed() -> None:
    global _STATE
    if dist.is_initialized():
        dist.destroy_process_group()
    _STATE = _TPState()


def get_tp_rank() -> int:
    return _STATE.rank


def get_tp_size() -> int:
    return _STATE.size


def get_tp_cpu_group() -> Optional[Any]:
    return _STATE.cpu_group


def tensor_model_parallel_all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum over ranks (in place when distributed); the identity for size 1."""
    if _STATE.size == 1:
        return x
    dist.all_reduce(x, group=_STATE.device_group)
    return x


def tensor_model_parallel_all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Concatenate every rank's `x` along `dim` (rank order); the identity for size 1."""
    if _STATE.size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(_STATE.size)]
    dist.all_gather(parts, x.contiguous(), group=_STATE.device_group)
    return torch.cat(parts, dim=dim)


def all_reduce_min_int(value: int) -> int:
    """The minimum of a host integer over ranks (e.g. KV slots every rank can afford)."""
    if _STATE.size == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=_STATE.cpu_group)
    return int(t.item())


def broadcast_pyobj(obj: Any, src: int = 0) -> Any:
    """Send a picklable object from rank `src` to every rank over the CPU group; returns it everywhere."""
    if _STATE.size == 1:
        return obj
    group = _STATE.cpu_group
    if _STATE.rank == src:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
        dist.broadcast(size, src=src, group=group)
        dist.broadcast(payload, src=src, group=group)
        return obj
    size = torch.empty(1, dtype=torch.int64)
    dist.broadcast(size, src=src, group=group)
    payload = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.broadcast(payload, src=src, group=group)
    return pickle.loads(payload.numpy().tobytes())
