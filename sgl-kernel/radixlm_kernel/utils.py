"""Small launch helpers shared by the kernels."""

from __future__ import annotations

import triton


def next_power_of_2(n: int) -> int:
    return triton.next_power_of_2(max(1, int(n)))


def num_warps_for(block: int) -> int:
    """Warps for a one-row-per-program kernel of `block` elements."""
    return max(1, min(16, block // 256))
