"""benchmark/hop_trace_summary.py pairs the hops of requests sent one at a time; `mark` writes nothing
unless RADIXLM_HOP_TRACE names a file."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmark"))
import hop_trace_summary as summary  # noqa: E402

from radixlm.managers.hop_trace import HOPS  # noqa: E402


def _request(t0: float, gap_ms: float) -> list[tuple[float, str]]:
    return [(t0 + k * gap_ms / 1e3, hop) for k, hop in enumerate(HOPS)]


def test_requests_pair_hops_in_order() -> None:
    rows = sorted(_request(10.0, 1.0) + _request(20.0, 2.0) + [(30.0, "http_in"), (30.001, "tm_sent")])
    rows += [(20.0005, "detok_recv")]  # a later request's hop out of order (a decode's): skipped by time order
    reqs = summary.requests(sorted(rows))
    assert len(reqs) == 2  # the third never reached http_out
    assert [round(b - a, 6) for a, b in zip(reqs[1], reqs[1][1:])] == [0.002] * (len(HOPS) - 1)


def test_a_request_overtaken_by_the_next_arrival_is_left_out() -> None:
    first, second = _request(10.0, 1.0), _request(10.0005, 1.0)
    reqs = summary.requests(sorted(first + second))
    assert len(reqs) == 1 and reqs[0][0] == second[0][0]  # the first met the second's http_in before http_out


def test_mark_writes_only_when_enabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import radixlm.managers.hop_trace as hop_trace

    path = tmp_path / "hops.log"
    monkeypatch.delenv("RADIXLM_HOP_TRACE", raising=False)
    importlib.reload(hop_trace).mark("http_in")
    assert not path.exists()
    monkeypatch.setenv("RADIXLM_HOP_TRACE", str(path))
    traced = importlib.reload(hop_trace)
    traced.mark("http_in")
    traced.mark("tm_sent")
    assert [line.split()[2] for line in path.read_text().splitlines()] == ["http_in", "tm_sent"]
    monkeypatch.delenv("RADIXLM_HOP_TRACE")
    importlib.reload(hop_trace)
