"""The stream gate: work queued behind `wait_gate` waits for the flag to be released on another stream."""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import hold_gate, new_gate, release_gate, wait_gate


def test_open_gate_passes(device: str) -> None:
    flag = new_gate(device)
    out = torch.zeros(4, device=device)
    wait_gate(flag)
    out += 1
    assert out.tolist() == [1.0] * 4 and flag.item() == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="streams need CUDA")
def test_held_gate_stalls_until_the_other_stream_releases() -> None:
    flag = new_gate("cuda")
    gated, holder = torch.cuda.Stream(), torch.cuda.Stream(priority=-1)
    x = torch.zeros(1, device="cuda")
    held = torch.cuda.Event()
    with torch.cuda.stream(holder):
        hold_gate(flag)
        held.record()
        torch.cuda._sleep(40_000_000)  # ~20 ms of spinning on the holder stream (the gate times out at 200)
        x.fill_(7.0)  # what the gated stream must see
        release_gate(flag)
    with torch.cuda.stream(gated):
        gated.wait_event(held)  # the hold is in place (an event orders only that, not the write below)
        wait_gate(flag)
        y = x * 2
    gated.synchronize()
    assert y.item() == 14.0  # ran after the holder's write, though nothing but the gate ordered it
    assert flag.item() == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="streams need CUDA")
def test_a_gate_never_released_opens_after_its_timeout() -> None:
    """A host that syncs while holding the gate (release not queued yet) stalls; it does not deadlock."""
    flag = new_gate("cuda")
    hold_gate(flag)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    wait_gate(flag, timeout_ns=20_000_000)
    end.record()
    end.synchronize()
    assert 15.0 < start.elapsed_time(end) < 500.0
    assert flag.item() == 1  # still held: the gate gave up waiting, nothing released it
