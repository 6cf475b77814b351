"""A device-side gate between CUDA streams: work queued behind `wait_gate(flag)` starts once `flag` is 0.

The scheduler launches decode batch N+1 while batch N runs, so a prefill arriving during N would
share the GPU with both. A decode stream whose batches each begin with `wait_gate(flag)`, and a
prefill stream that sets the flag before its batch and clears it after (`hold_gate` /
`release_gate`, both queued on that stream), keeps the decodes not yet started from running beside
the prefill: a queued decode starts the moment the prefill's last kernel ends, with no host in the
loop. While the flag is 0 the gate is one single-thread kernel that reads it once.

A held gate also opens by itself after `timeout_ns` of waiting: a host thread that synchronizes
the device while it is still queueing the prefill (a Triton compile loading its module, the caching
allocator freeing blocks, a pinned-memory allocation) would otherwise wait for the gated decode,
which waits for a release that thread has not queued yet. The timeout turns that deadlock into a
stall of at most `timeout_ns`; the gate only orders work for speed, so opening early is safe.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


DEFAULT_TIMEOUT_NS = 200_000_000  # longer than a prefill chunk of 8,192 tokens of an 8B model on an H200


@triton.jit
def _wait_gate_kernel(flag_ptr, timeout_ns):
    held = tl.load(flag_ptr, volatile=True)
    if held != 0:
        start = tl.extra.cuda.globaltimer()
        waited = start - start
        while (held != 0) & (waited < timeout_ns):
            held = tl.load(flag_ptr, volatile=True)
            waited = tl.extra.cuda.globaltimer() - start


def new_gate(device: torch.device | str) -> torch.Tensor:
    """An open gate (int32 flag, 0 = open)."""
    return torch.zeros(1, dtype=torch.int32, device=device)


def wait_gate(flag: torch.Tensor, timeout_ns: int = DEFAULT_TIMEOUT_NS) -> None:
    """Queue on the current stream: everything after it waits until `flag` is 0 (or `timeout_ns` passed)."""
    _wait_gate_kernel[(1,)](flag, timeout_ns, num_warps=1)


def hold_gate(flag: torch.Tensor) -> None:
    """Queue on the current stream: close the gate (work behind a later-reached wait_gate stalls)."""
    flag.fill_(1)


def release_gate(flag: torch.Tensor) -> None:
    """Queue on the current stream: open the gate."""
    flag.fill_(0)
