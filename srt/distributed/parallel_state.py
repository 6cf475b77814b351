"""Tensor-parallel communication: one group for tensors, one CPU (gloo) group for host objects.

With a world size of 1 nothing is initialised and every collective is the identity, so
single-device runs never touch `torch.distributed`. Layers take `tp_rank`/`tp_size`
explicitly (shard math is testable without processes); only the collectives read the
state kept here.

Three groups, each used by one thread only (collectives on one group must be issued in
the same order on every rank, so two threads must never share a group):
- the world group (gloo, long timeout): rendezvous and startup agreement (KV size,
  readiness), while ranks may still be loading weights at different speeds;
- `device_group` (NCCL on CUDA, gloo on CPU): the model's all-reduce / all-gather, on
  whichever thread runs the forward (the overlap loop's forward thread);
- `cpu_group` (gloo, bounded timeout): the scheduler loop's input broadcast and
  consistency checks; a dead rank fails its peers within `RADIXLM_DIST_TIMEOUT_S`.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

import torch
import torch.distributed as dist

from radixlm import environ

NCCL_TIMEOUT_S = 600.0  # the NCCL watchdog's bound; the launcher's child watchdog acts sooner


@dataclass
class _TPState:
    rank: int = 0
    size: int = 1
    device_group: Optional[Any] = None  # NCCL on CUDA, gloo on CPU
    cpu_group: Optional[Any] = None  # gloo: Python objects and host-side agreement in the scheduler loop


_STATE = _TPState()


def init_distributed(tp_rank: int, tp_size: int, backend: str = "gloo",
                     init_method: Optional[str] = None) -> None:
    """Join the tensor-parallel group (`backend` "nccl" on CUDA, "gloo" on CPU); a no-op for size 1."""
    global _STATE
    if tp_size == 1:
        _STATE = _TPState(rank=0, size=1)
        return
    if backend == "nccl":
        environ.set_default_nccl_env()
    if not dist.is_initialized():
        dist.init_process_group(backend="gloo", init_method=init_method or "env://", world_size=tp_size,
                                rank=tp_rank, timeout=timedelta(seconds=environ.dist_startup_timeout_s()))
    ranks = list(range(tp_size))
    bounded = timedelta(seconds=environ.dist_timeout_s())
    device_timeout = timedelta(seconds=NCCL_TIMEOUT_S) if backend == "nccl" else bounded
    device_group = dist.new_group(ranks, backend=backend, timeout=device_timeout)
    cpu_group = dist.new_group(ranks, backend="gloo", timeout=bounded)
    if backend == "nccl":  # create the communicator now: not lazily inside a CUDA graph capture
        dist.all_reduce(torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device())), group=device_group)
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


# ---- tensors (device group) ------------------------------------------------------------


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


# ---- host values -------------------------------------------------------------------------


def all_reduce_min_int(value: int) -> int:
    """The minimum of a host integer over ranks (startup: e.g. the KV slots every rank can afford)."""
    if _STATE.size == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)  # world group: other ranks may still be loading
    return int(t.item())


def all_gather_pyobj(obj: Any, startup: bool = False) -> list[Any]:
    """Every rank's picklable `obj`, in rank order, on every rank (`startup`: the long-timeout group)."""
    if _STATE.size == 1:
        return [obj]
    out: list[Any] = [None] * _STATE.size
    dist.all_gather_object(out, obj, group=None if startup else _STATE.cpu_group)
    return out


def all_gather_int(value: int) -> list[int]:
    """Every rank's int64 `value`, in rank order (one small collective on the CPU group)."""
    if _STATE.size == 1:
        return [value]
    parts = [torch.empty(1, dtype=torch.int64) for _ in range(_STATE.size)]
    dist.all_gather(parts, torch.tensor([value], dtype=torch.int64), group=_STATE.cpu_group)
    return [int(p.item()) for p in parts]


def broadcast_pyobj(obj: Any, src: int = 0) -> Any:
    """Send a picklable object from rank `src` to every rank over the CPU group; returns it everywhere.

    The size goes first; a falsy `obj` (e.g. the empty list of an idle step) is sent as size 0
    and comes back as None, so the common idle broadcast is one 8-byte collective."""
    if _STATE.size == 1:
        return obj
    group = _STATE.cpu_group
    if _STATE.rank == src:
        data = pickle.dumps(obj) if obj else b""
        dist.broadcast(torch.tensor([len(data)], dtype=torch.int64), src=src, group=group)
        if data:
            dist.broadcast(torch.frombuffer(bytearray(data), dtype=torch.uint8), src=src, group=group)
        return obj
    size = torch.empty(1, dtype=torch.int64)
    dist.broadcast(size, src=src, group=group)
    if int(size.item()) == 0:
        return None
    payload = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.broadcast(payload, src=src, group=group)
    return pickle.loads(payload.numpy().tobytes())


def stable_hash(data: bytes) -> int:
    """A process-independent signed 64-bit hash (Python's `hash` of str is salted per process)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)
