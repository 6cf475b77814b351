"""Small launch helpers shared by the kernels."""

from __future__ import annotations

import torch
import triton


def next_power_of_2(n: int) -> int:
    return triton.next_power_of_2(max(1, int(n)))


def num_warps_for(block: int) -> int:
    """Warps for a one-row-per-program kernel of `block` elements."""
    return max(1, min(16, block // 256))


FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def is_fp8(dtype: torch.dtype) -> bool:
    """An fp8 KV pool: kernels read it up to the query's dtype (fp8 is storage, not arithmetic)."""
    return dtype in FP8_DTYPES
