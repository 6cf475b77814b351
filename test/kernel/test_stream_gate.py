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
        torch.cuda._sleep(200_000_000)  # ~0.1 s of spinning on the holder stream
        x.fill_(7.0)  # what the gated stream must see
        release_gate(flag)
    with torch.cuda.stream(gated):
        gated.wait_event(held)  # the hold is in place (an event orders only that, not the write below)
        wait_gate(flag)
        y = x * 2
    gated.synchronize()
    assert y.item() == 14.0  # ran after the holder's write, though nothing but the gate ordered it
    assert flag.item() == 0
