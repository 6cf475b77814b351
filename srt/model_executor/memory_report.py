"""Where one rank's device memory went: weights, the KV pool, and the peak of everything else.

`--mem-fraction-static` keeps `1 - fraction` of the device for activations, CUDA graphs and the
request table; `peak_other_gib` is how much of that a run actually used beside the table (the
allocator's peak reservation less the weights, with their buffers, the pool and the table), so a run
can show how much headroom the fraction left. Rank 0's scheduler reports it in `get_server_info`
under `memory`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

import torch

GIB = float(1 << 30)


@dataclass(frozen=True)
class MemoryReport:
    weights_gib: float
    kv_cache_gib: float
    req_to_token_gib: float
    device_total_gib: Optional[float] = None  # CUDA only, from here down
    mem_fraction_static: Optional[float] = None
    reserved_gib: Optional[float] = None  # the caching allocator's reservation now
    peak_reserved_gib: Optional[float] = None  # and its peak since start
    peak_other_gib: Optional[float] = None  # peak reservation less weights, KV pool and request table
    device_free_gib: Optional[float] = None  # free on the device now (outside every process's allocations)

    def as_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def memory_report(model: torch.nn.Module, kv_buffers: list[torch.Tensor], req_to_token: torch.Tensor,
                  device: torch.device, mem_fraction_static: Optional[float]) -> MemoryReport:
    weights = tensor_bytes(model.parameters()) + tensor_bytes(model.buffers())
    kv, table = tensor_bytes(kv_buffers), tensor_bytes([req_to_token])
    if device.type != "cuda":
        return MemoryReport(weights / GIB, kv / GIB, table / GIB)
    peak = torch.cuda.max_memory_reserved(device)
    free, total = torch.cuda.mem_get_info(device)
    return MemoryReport(
        weights / GIB, kv / GIB, table / GIB, device_total_gib=total / GIB, device_free_gib=free / GIB,
        mem_fraction_static=mem_fraction_static,
        reserved_gib=torch.cuda.memory_reserved(device) / GIB, peak_reserved_gib=peak / GIB,
        peak_other_gib=(peak - weights - kv - table) / GIB)
