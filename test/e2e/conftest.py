"""A real HTTP server on loopback, shared by the e2e test files of the HTTP API.

One `python -m radixlm.launch_server` process (embedded SmolLM2) for the session, started
with an API key, metrics on, a queue limit and a small KV pool (the machine is shared).
At the end it gets SIGTERM and must exit 0.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest

from radixlm import environ

API_KEY = "radixlm-test-key"
MAX_QUEUED_REQUESTS = 20
MAX_TOTAL_TOKENS = 16384
TOOL_CALL_PARSER = "llama3"  # SmolLM2 has no call format of its own; tests force the JSON a llama3 call is
REASONING_PARSER = "qwen3"  # SmolLM2 does not think; tests force a <think> block with a regex
READY_MESSAGE = "The server is fired up and ready to roll!"


@dataclasses.dataclass
class ServerHandle:
    base_url: str
    api_key: str
    proc: subprocess.Popen
    log_path: Path

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def _wait_ready(handle: ServerHandle, timeout_s: float) -> None:
    """/health answers once uvicorn listens; the ready line follows the warm-up request."""
    deadline = time.monotonic() + timeout_s
    while not (_healthy(handle.base_url) and READY_MESSAGE in handle.log_path.read_text(errors="replace")):
        if handle.proc.poll() is not None or time.monotonic() > deadline:
            handle.proc.kill()
            pytest.fail(f"server did not become ready (rc={handle.proc.poll()}):\n{handle.log_tail()}")
        time.sleep(1)


def start_server(flags: list[str], log_path: Path, api_key: str = "") -> ServerHandle:
    """`python -m radixlm.launch_server FLAGS` on a free port, once it is ready (the caller stops it)."""
    port = free_port()
    cmd = [sys.executable, "-m", "radixlm.launch_server", "--port", str(port), *flags]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    handle = ServerHandle(f"http://127.0.0.1:{port}", api_key, proc, log_path)
    _wait_ready(handle, environ.test_server_timeout_s())
    return handle


def make_tiny_llama(folder: Path, tokenizer_dir: str, **config: object) -> str:
    """Save a random 2-layer Llama (heads divide by 2; `config` overrides) with `tokenizer_dir`'s tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(**{**dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                                num_hidden_layers=2, architectures=["LlamaForCausalLM"]), **config})
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(folder)
    for name in os.listdir(tokenizer_dir):
        if name.startswith("tokenizer"):
            shutil.copy(os.path.join(tokenizer_dir, name), folder)
    return str(folder)


@pytest.fixture(scope="session")
def tiny_llama_maker() -> Callable[..., str]:
    """`make_tiny_llama` for the tests that serve a tiny random model."""
    return make_tiny_llama


@pytest.fixture(scope="session")
def server_starter() -> Callable[..., ServerHandle]:
    """`start_server` for tests that need a server of their own (one they may break)."""
    return start_server


@pytest.fixture(scope="session")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    log_path = tmp_path_factory.mktemp("http_server") / "server.log"
    handle = start_server(["--api-key", API_KEY, "--enable-metrics", "--max-queued-requests",
                           str(MAX_QUEUED_REQUESTS), "--max-total-tokens", str(MAX_TOTAL_TOKENS),
                           "--tool-call-parser", TOOL_CALL_PARSER, "--reasoning-parser", REASONING_PARSER],
                          log_path, API_KEY)
    proc = handle.proc
    try:
        yield handle
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    assert rc == 0, f"server exited with {rc}:\n{handle.log_tail()}"
