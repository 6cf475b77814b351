"""The server's warm-up with --enable-mixed-chunk (a tiny random Llama): a second request arrives while the first
decodes, so a MIXED batch (a prefill carrying the running decode) runs before the server says it is ready."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import httpx
import pytest

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_mixed_chunk_warmup_runs_a_mixed_batch(smollm2_dir: str, tiny_llama_maker: Callable, tmp_path: Path,
                                               server_starter: Callable, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_llama_maker(tmp_path / "tiny", smollm2_dir, vocab_size=49152)
    trace = tmp_path / "steps.jsonl"
    monkeypatch.setenv("RADIXLM_STEP_TRACE", str(trace))  # the scheduler inherits it
    handle = server_starter(["--model-path", model, "--dtype", "float32", "--max-total-tokens", "4096",
                             "--enable-mixed-chunk"], tmp_path / "server.log")
    try:
        warmup = [json.loads(line) for line in trace.read_text().splitlines()]  # ready: the warm-up is done
        mixed = [r for r in warmup if r["kind"] == "mixed"]
        assert mixed, [(r["kind"], r["bs"], r["new_tokens"]) for r in warmup]
        # the second prompt's prefill (several new tokens) and the first request's decode (one) in one batch
        assert all(r["bs"] == 2 and r["new_tokens"] > 2 for r in mixed), mixed
        body = {"text": "Hello", "sampling_params": {"max_new_tokens": 3, "temperature": 0, "ignore_eos": True}}
        r = httpx.post(f"{handle.base_url}/generate", json=body, timeout=60)
        assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 3, r.text
    finally:
        handle.proc.terminate()
        handle.proc.wait(timeout=60)
    assert handle.proc.returncode == 0, handle.log_tail()
