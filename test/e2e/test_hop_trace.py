"""RADIXLM_HOP_TRACE on a real server (a tiny random Llama): every process marks the hops of a streamed
request, in the order its first token passes them, and `benchmark/hop_trace_summary.py` pairs them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable

import httpx
import pytest

from radixlm.managers.hop_trace import HOPS

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_every_hop_is_marked_in_order(smollm2_dir: str, tiny_llama_maker: Callable, tmp_path: Path,
                                      server_starter: Callable, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_llama_maker(tmp_path / "tiny", smollm2_dir, vocab_size=49152)
    trace = tmp_path / "hops.log"
    monkeypatch.setenv("RADIXLM_HOP_TRACE", str(trace))  # the server processes inherit it
    handle = server_starter(["--model-path", model, "--dtype", "float32", "--max-total-tokens", "4096"],
                            tmp_path / "server.log")
    try:
        trace.write_text("")  # from here on: the warm-up request is not ours
        for _ in range(3):
            body = {"input_ids": list(range(100, 164)), "stream": True,
                    "sampling_params": {"max_new_tokens": 2, "temperature": 0, "ignore_eos": True}}
            with httpx.stream("POST", f"{handle.base_url}/generate", json=body, timeout=60) as r:
                assert r.status_code == 200
                events = [line for line in r.iter_lines() if line.startswith("data:")]
                assert len(events) >= 2 and events[-1] == "data: [DONE]", events  # outputs, then [DONE]
    finally:
        handle.proc.terminate()
        handle.proc.wait(timeout=60)
    rows = [line.split() for line in trace.read_text().splitlines()]
    assert {hop for _, _, hop in rows} == set(HOPS)
    assert len({pid for _, pid, _ in rows}) == 3  # the main process, the scheduler and the detokenizer
    out = subprocess.run([sys.executable, str(REPO / "benchmark" / "hop_trace_summary.py"), str(trace), "--skip", "0"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("3 requests"), out
    gaps = {line.split(" | ")[0].lstrip("| "): float(line.split(" | ")[1]) for line in out.splitlines()
            if line.startswith("| ") and "->" in line}
    assert all(gap >= 0 for gap in gaps.values()), gaps
    assert gaps["launched -> result"] > 0 and gaps["http_in -> http_out"] >= gaps["launched -> result"], gaps
