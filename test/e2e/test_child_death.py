"""A scheduler that dies mid-stream: the official `openai` client's stream ends in an APIError naming
the cause (an SSE error event, not a cut connection), /health turns 503, and the server then exits
non-zero. Its own server (a tiny random Llama, so it starts in seconds), since it is killed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Callable

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def tiny_model(tmp_path: Path, smollm2_dir: str, tiny_llama_maker: Callable) -> str:
    """SmolLM2's vocabulary, so any prompt text is in range; room for a long generation."""
    return tiny_llama_maker(tmp_path / "tiny", smollm2_dir, vocab_size=49152, max_position_embeddings=4096)


@pytest.mark.timeout(300)
def test_a_dead_scheduler_ends_the_stream_with_an_error_and_stops_the_server(
        tiny_model: str, tmp_path: Path, server_starter: Callable) -> None:
    handle = server_starter(["--model-path", tiny_model, "--dtype", "float32", "--max-total-tokens", "8192"],
                            tmp_path / "server.log")
    proc = handle.proc
    try:
        scheduler_pid = httpx.get(f"{handle.base_url}/get_server_info").json()["tp_ranks"][0]["pid"]
        client = openai.OpenAI(base_url=f"{handle.base_url}/v1", api_key="unused", max_retries=0)
        stream = client.completions.create(model=tiny_model, prompt="Count to a thousand:", max_tokens=3000,
                                           stream=True, extra_body={"ignore_eos": True})
        chunks = iter(stream)
        assert next(chunks).choices  # the generation is under way
        os.kill(scheduler_pid, signal.SIGKILL)
        with pytest.raises(openai.APIError, match="unhealthy"):
            for _ in chunks:
                pass
        health = httpx.get(f"{handle.base_url}/health", timeout=5)  # inside the grace period before the exit
        assert health.status_code == 503 and "scheduler" in health.text, health.text
        assert proc.wait(timeout=60) != 0, handle.log_tail()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
