"""The one place in the kernel package that reads environment variables.

All of them are prefixed RADIXLM_ (plus Triton's own TRITON_INTERPRET). The kernel package cannot import the
server's `srt/environ.py` (kernels do not import upward), so it keeps its own. The decode-attention knobs are
for A/B runs on a GPU: each returns None when its variable is unset, and an error naming the variable when its
value does not parse.
"""

from __future__ import annotations

import os
from typing import Optional

DecodeKnobs = tuple[int, int, int, bool, int, bool]  # BLOCK_N, warps, stages, K/V on the left, kv heads, slots ahead
SmallKnobs = tuple[int, int, int, bool, bool]  # BLOCK_N, warps, stages, K/V on the left, slots ahead
Occupancy = tuple[int, tuple[tuple[int, int], ...]]  # programs per SM, then (max rows, programs per SM) bands


def _get(name: str) -> Optional[str]:
    """RADIXLM_<name>, None when unset or empty."""
    return os.environ.get(f"RADIXLM_{name}") or None


def parse_decode_knobs(name: str, value: str) -> DecodeKnobs:
    """BLOCK_N,WARPS,STAGES,SWAP_AB[,KV_HEADS[,SLOTS_AHEAD]] from environment variable `name`
    (KV_HEADS defaults to 1, SLOTS_AHEAD to 0)."""
    try:
        fields = [int(x) for x in value.split(",")]
        if len(fields) not in (4, 5, 6):
            raise ValueError
    except ValueError:
        raise ValueError(f"{name} must be BLOCK_N,WARPS,STAGES,SWAP_AB[,KV_HEADS[,SLOTS_AHEAD]] (four to six "
                         f"integers), got {value!r}") from None
    block_n, warps, stages, swap, heads, ahead = fields + [1, 0][len(fields) - 4:]
    return block_n, warps, stages, bool(swap), heads, bool(ahead)


def parse_decode_small(value: str) -> tuple[int, SmallKnobs]:
    """MAX_BS:BLOCK_N,WARPS,STAGES,SWAP_AB,SLOTS_AHEAD from RADIXLM_KERNEL_DECODE_SMALL (bf16 pools' small
    batches), else an error naming the variable."""
    try:
        head, _, knobs = value.partition(":")
        fields = [int(x) for x in knobs.split(",")]
        if len(fields) != 5 or int(head) < 0 or min(fields[:3]) < 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"RADIXLM_KERNEL_DECODE_SMALL must be MAX_BS:BLOCK_N,WARPS,STAGES,SWAP_AB,SLOTS_AHEAD "
                         f"(e.g. 4:64,4,3,0,1), got {value!r}") from None
    block_n, warps, stages, swap, ahead = fields
    return int(head), (block_n, warps, stages, bool(swap), bool(ahead))


def parse_decode_occupancy(value: str) -> Occupancy:
    """OCCUPANCY and OCCUPANCY_BANDS from RADIXLM_KERNEL_DECODE_OCCUPANCY: "OCCUPANCY[,MAX_BS:OCC]...",
    positive integers (e.g. "2,4:2,16:3", the eighteenth session's defaults); bands come back sorted."""
    try:
        head, *bands = value.split(",")
        occupancy = int(head)
        pairs = tuple(sorted((int(a), int(b)) for a, b in (band.split(":") for band in bands)))
        if occupancy < 1 or any(a < 1 or b < 1 for a, b in pairs):
            raise ValueError
    except ValueError:
        raise ValueError(f"RADIXLM_KERNEL_DECODE_OCCUPANCY must be OCCUPANCY[,MAX_BS:OCCUPANCY]... (positive "
                         f"integers, e.g. 2,8:6,16:4), got {value!r}") from None
    return occupancy, pairs


def decode_knobs(fp8: bool) -> Optional[DecodeKnobs]:
    """RADIXLM_KERNEL_FP8_DECODE (fp8 pools) or RADIXLM_KERNEL_DECODE (the others): the decode attention's
    knobs for batches above the small ones."""
    name = "KERNEL_FP8_DECODE" if fp8 else "KERNEL_DECODE"
    value = _get(name)
    return parse_decode_knobs(f"RADIXLM_{name}", value) if value else None


def decode_small() -> Optional[tuple[int, SmallKnobs]]:
    """RADIXLM_KERNEL_DECODE_SMALL: the largest small batch of a bf16 pool and its decode knobs."""
    value = _get("KERNEL_DECODE_SMALL")
    return parse_decode_small(value) if value else None


def decode_occupancy() -> Optional[Occupancy]:
    """RADIXLM_KERNEL_DECODE_OCCUPANCY: split programs per SM the decode attention aims for."""
    value = _get("KERNEL_DECODE_OCCUPANCY")
    return parse_decode_occupancy(value) if value else None


def pdl_switch() -> bool:
    """RADIXLM_PDL: 1 (the default) launches the kernels with PDL where the GPU supports it, 0 without."""
    value = (_get("PDL") or "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"RADIXLM_PDL must be 0 or 1, got {value!r}")
    return value == "1"


def cuda_gemv_pdl(default: int) -> int:
    """RADIXLM_CUDA_GEMV_PDL: how the CUDA GEMVs use PDL, an integer from 0 to 7 (see `cuda_gemv.pdl_bits`)."""
    value = (_get("CUDA_GEMV_PDL") or str(default)).strip()
    if value not in tuple("01234567"):
        raise ValueError(f"RADIXLM_CUDA_GEMV_PDL must be an integer from 0 to 7, got {value!r}")
    return int(value)


def kernel_cache_dir() -> str:
    """Where the CUDA GEMV extension is built: <RADIXLM_CACHE_DIR or ~/.cache/radixlm>/kernels (the root is
    the one the server caches converted models in)."""
    root = _get("CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "radixlm")
    return os.path.join(root, "kernels")


def triton_interpreted() -> bool:
    """Whether Triton runs its kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET") == "1"
