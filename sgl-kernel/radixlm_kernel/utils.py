"""Small launch helpers shared by the kernels."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
import triton
import triton.language as tl

from radixlm_kernel import environ


def next_power_of_2(n: int) -> int:
    return triton.next_power_of_2(max(1, int(n)))


def num_warps_for(block: int) -> int:
    """Warps for a one-row-per-program kernel of `block` elements."""
    return max(1, min(16, block // 256))


# whether this Triton's `jit` takes `do_not_specialize_on_alignment` (read once, at import)
_JIT_TAKES_ALIGNMENT = "do_not_specialize_on_alignment" in inspect.signature(triton.jit).parameters


def jit_any_alignment(*names: str) -> Callable[[Callable], Any]:
    """`triton.jit` that leaves the 16-byte alignment of the pointer arguments `names` out of the kernel's
    specialization key. For per-request index arrays (pool rows, lengths, positions, slot ids) read one element
    per program: they reach the kernels as slices at any offset (the allocator's slot ids are a slice of its
    free list, a MIXED batch's decode rows the tail of the batch's arrays), so their alignment changes from
    batch to batch, and Triton would compile a variant per combination on first sight (on an H100: 0.2 s for
    the rotary kernel, 0.6-1.6 s for the attention kernels, stalling the batch that meets it). Where Triton
    lacks the option this is plain `triton.jit`."""
    def decorate(fn: Callable) -> Any:
        params = list(inspect.signature(fn).parameters)
        missing = [n for n in names if n not in params]
        if missing:
            raise ValueError(f"{fn.__name__} has no arguments {missing}")
        if not _JIT_TAKES_ALIGNMENT:
            return triton.jit(fn)
        return triton.jit(fn, do_not_specialize_on_alignment=[params.index(n) for n in names])
    return decorate


FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def is_fp8(dtype: torch.dtype) -> bool:
    """An fp8 KV pool: kernels read it up to the query's dtype (fp8 is storage, not arithmetic)."""
    return dtype in FP8_DTYPES


# ---- programmatic dependent launch (PDL, sm90+) ---------------------------------------------------------
# A kernel launched with PDL may start while the kernel before it in the stream is still finishing: its
# programs are placed on the SMs early and wait in `griddepcontrol.wait` (`gdc_wait`) until that kernel
# has completed and its writes are visible. Each PDL kernel here waits before its first global read and
# only then lets its own dependents start (`gdc_launch_dependents`), so when one starts, every kernel
# before its predecessor has completed: the chain keeps stream order. RADIXLM_PDL=0 turns it off.
# device index -> (CUDA C++ kernels may launch with PDL, Triton kernels may): RADIXLM_PDL and an sm90+ GPU,
# and for Triton also its support for it and no interpreter; decided once per device (tests clear it).
_PDL_CACHE: dict[int, tuple[bool, bool]] = {}


def _triton_has_pdl() -> bool:
    if environ.triton_interpreted():
        return False
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: F401
    except ImportError:
        return False
    return "launch_pdl" in getattr(CUDAOptions, "__dataclass_fields__", {})


def _pdl_for(x: torch.Tensor) -> tuple[bool, bool]:
    if x.device.type != "cuda":
        return False, False
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    if index not in _PDL_CACHE:
        gpu = environ.pdl_switch() and torch.cuda.get_device_capability(x.device)[0] >= 9
        _PDL_CACHE[index] = (gpu, gpu and _triton_has_pdl())
    return _PDL_CACHE[index]


@triton.jit
def pdl_begin(USE_PDL: tl.constexpr):
    """A PDL kernel's first statement: wait for the kernel before it, then let the next one start (that
    order is what keeps the chain in stream order, above); nothing when USE_PDL is off."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


def pdl_on_gpu(x: torch.Tensor) -> bool:
    """Whether a CUDA C++ kernel for tensors on x's device should launch with PDL (RADIXLM_PDL on, an
    sm90+ GPU); Triton kernels also need Triton's support for it, so they use `pdl_args`."""
    return _pdl_for(x)[0]


def pdl_args(x: torch.Tensor) -> dict:
    """Launch arguments for a kernel with a `USE_PDL: tl.constexpr` parameter, for tensors on x's device."""
    return {"USE_PDL": True, "launch_pdl": True} if _pdl_for(x)[1] else {"USE_PDL": False}
