"""CUDA graph capture keeps Python's cyclic collector off (`cuda_graph_runner._no_gc_during_capture`): a
collection inside a capture that destroyed an unreachable earlier graph would invalidate the capture."""

from __future__ import annotations

import gc

import pytest

from radixlm.model_executor.cuda_graph_runner import _no_gc_during_capture


class _Cycle:
    collected = 0

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        _Cycle.collected += 1


def test_collects_first_then_disables_and_restores() -> None:
    assert gc.isenabled()
    _Cycle()  # unreachable, but only the cyclic collector can free it
    before = _Cycle.collected
    with _no_gc_during_capture():
        assert _Cycle.collected == before + 1  # collected before the capture starts
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restores_after_an_error_and_keeps_a_disabled_collector_off() -> None:
    with pytest.raises(RuntimeError, match="capture failed"):
        with _no_gc_during_capture():
            raise RuntimeError("capture failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with _no_gc_during_capture():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
