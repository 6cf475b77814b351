"""Tensor-parallel serving on the CPU (gloo, real processes): replicated schedulers, multi-node, failures.

- TP=2 (tiny random Llama, 4 heads / 2 KV heads) and TP=3 (SmolLM2, 9 heads / 3 KV heads)
  Engines give the greedy tokens of a TP=1 ModelRunner, with prefix caching, chunked
  prefill and retraction all active (asserted from the scheduler's counters), and their
  ranks exit 0 on shutdown (rank 0 broadcasts the stop).
- Two "nodes" on one machine (two `radixlm.launch_server` processes, `--nnodes 2`) serve
  the same tokens; then SIGKILL of node 1's rank fails the in-flight request, and both
  launchers exit non-zero within a bounded time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest

import radixlm

pytestmark = pytest.mark.slow

PREFIX = list(range(100, 140))  # shared by every prompt: prefix-cache hits
PROMPTS = [PREFIX + [200 + i, 300 + 7 * i, 7 + i] for i in range(6)]
NEW_TOKENS = 24
# 40 shared + 6 x (3 + 24) tokens do not fit in 140 slots: decode must retract; 43-token prompts span 3 chunks
PRESSURE_KW = dict(device="cpu", max_total_tokens=140, chunked_prefill_size=16, log_level="warning",
                   grammar_backend="none")  # no grammar compiler per rank: less CPU on a 2-core machine
EXIT_BOUND_S = 90.0  # the gloo timeout (60 s) bounds how long a rank can wait on a dead peer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory, smollm2_dir: str, tiny_llama_maker: Callable) -> str:
    """A random Llama whose heads divide by 2, with the SmolLM2 tokenizer copied in."""
    return tiny_llama_maker(tmp_path_factory.mktemp("tiny_llama"), smollm2_dir, vocab_size=1024,
                            max_position_embeddings=512, bos_token_id=None, eos_token_id=None)


def reference_tokens(model_path: str, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """TP=1 greedy tokens from a ModelRunner in this process (no scheduler: a static batch)."""
    from radixlm.model_executor.forward_batch_builder import generate_static_batch
    from radixlm.model_executor.model_runner import ModelRunner
    from radixlm.server_args import ServerArgs

    args = ServerArgs(model_path=model_path, device="cpu", max_total_tokens=4096, max_running_requests=16).resolved()
    return generate_static_batch(ModelRunner(args), prompts, new_tokens)


def greedy(n: int) -> dict:
    return {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}


def run_engine(model_path: str, tp_size: int, prompts: list[list[int]], new_tokens: int, **kw: object) -> tuple:
    with radixlm.Engine(model_path=model_path, tp_size=tp_size, **kw) as engine:
        outs = engine.generate(input_ids=prompts, sampling_params=greedy(new_tokens))
        info = engine.get_server_info()
        procs = list(engine.children.procs.items())
    return [o["output_ids"] for o in outs], info, {name: p.exitcode for name, p in procs}


def assert_pressure_paths(info: dict, num_ranks: int) -> None:
    assert len(info["tp_ranks"]) == num_ranks and [r["tp_rank"] for r in info["tp_ranks"]] == list(range(num_ranks))
    assert info["cached_tokens"] > 0, "prefix cache never hit"
    assert info["num_retractions"] > 0, "no retraction happened"
    assert info["memory_leak"] is False


def test_tp2_tiny_llama_matches_tp1(tiny_llama: str) -> None:
    expected = reference_tokens(tiny_llama, PROMPTS, NEW_TOKENS)
    tokens, info, exit_codes = run_engine(tiny_llama, 2, PROMPTS, NEW_TOKENS, enable_tp_consistency_check=True,
                                          **PRESSURE_KW)
    assert tokens == expected
    assert_pressure_paths(info, 2)
    assert exit_codes == {"scheduler-tp0": 0, "scheduler-tp1": 0, "detokenizer": exit_codes["detokenizer"]}


def test_tp3_smollm2_matches_tp1(smollm2_dir: str) -> None:
    prompts = [p[:30] + p[-3:] for p in PROMPTS[:3]]  # 33 tokens: 3 chunks of 16 each
    expected = reference_tokens(smollm2_dir, prompts, 12)
    # admission reserves 0.7 x 12 new tokens a request: two fit in 55 slots (30 shared + 2 x 11.4),
    # but their decodes need 30 + 2 x (3 + 11) = 58: retraction
    kw = dict(PRESSURE_KW, max_total_tokens=55)
    tokens, info, exit_codes = run_engine(None, 3, prompts, 12, **kw)
    assert tokens == expected
    assert_pressure_paths(info, 3)
    assert [exit_codes[f"scheduler-tp{r}"] for r in range(3)] == [0, 0, 0]


# ---- two nodes on one machine -----------------------------------------------------------------


def start_node(model_path: str, node_rank: int, dist_port: int, http_port: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "radixlm.launch_server", "--model-path", model_path, "--device", "cpu",
           "--tp-size", "2", "--nnodes", "2", "--node-rank", str(node_rank),
           "--dist-init-addr", f"127.0.0.1:{dist_port}", "--port", str(http_port), "--log-level", "info",
           "--skip-server-warmup", "--grammar-backend", "none"]  # the warm-up's text has token ids beyond the tiny vocabulary
    with open(log, "w") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)


def http_json(url: str, body: dict | None = None, timeout: float = 60.0) -> object:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                 method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_healthy(url: str, procs: list[subprocess.Popen], logs: list[Path], timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            break
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    tails = "\n".join(log.read_text(errors="replace")[-3000:] for log in logs)
    pytest.fail(f"two-node server did not become healthy (rc={[p.poll() for p in procs]}):\n{tails}")


def stream_long_request(url: str, result: dict) -> None:
    """Streams one long generation; records the chunks, and the error if the stream breaks."""
    body = {"input_ids": PROMPTS[0], "sampling_params": greedy(440), "stream": True}
    req = urllib.request.Request(f"{url}/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    chunks = result.setdefault("chunks", [])
    try:
        with urllib.request.urlopen(req, timeout=EXIT_BOUND_S) as resp:
            for line in resp:
                line = line.decode().strip()
                if line.startswith("data:") and line != "data: [DONE]":
                    chunks.append(json.loads(line[len("data:"):]))
    except (OSError, ValueError) as exc:
        result["error"] = repr(exc)


def finished_normally(chunks: list[dict]) -> bool:
    return any((c.get("meta_info") or {}).get("finish_reason", {}) and
               c["meta_info"]["finish_reason"].get("type") == "length" for c in chunks)


@pytest.fixture
def two_nodes(tiny_llama: str, tmp_path: Path) -> Iterator[tuple[str, list[subprocess.Popen], list[Path]]]:
    dist_port, http_port = free_port(), free_port()
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    procs = [start_node(tiny_llama, rank, dist_port, http_port, logs[rank]) for rank in (0, 1)]
    try:
        yield f"http://127.0.0.1:{http_port}", procs, logs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_two_nodes_serve_same_tokens_then_a_killed_rank_stops_the_server(tiny_llama: str, two_nodes: tuple) -> None:
    url, procs, logs = two_nodes
    expected = reference_tokens(tiny_llama, PROMPTS[:3], 8)
    wait_healthy(url, procs, logs)
    outs = http_json(f"{url}/generate", {"input_ids": PROMPTS[:3], "sampling_params": greedy(8)})
    assert [o["output_ids"] for o in outs] == expected
    info = http_json(f"{url}/get_server_info")
    ranks = {r["tp_rank"]: r["pid"] for r in info["tp_ranks"]}
    assert sorted(ranks) == [0, 1]

    result: dict = {}
    streamer = threading.Thread(target=stream_long_request, args=(url, result), daemon=True)
    streamer.start()
    deadline = time.monotonic() + 60
    while not result.get("chunks") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert result.get("chunks"), f"the long request never streamed: {result}"
    killed_at = time.monotonic()
    os.kill(ranks[1], signal.SIGKILL)  # node 1's rank: node 0 learns of it only through gloo

    codes = [p.wait(timeout=EXIT_BOUND_S) for p in procs]
    elapsed = time.monotonic() - killed_at
    streamer.join(timeout=10)
    tails = "\n".join(log.read_text(errors="replace")[-3000:] for log in logs)
    assert codes[0] != 0 and codes[1] != 0, f"exit codes {codes}:\n{tails}"
    assert elapsed < EXIT_BOUND_S
    assert not finished_normally(result["chunks"]), "the in-flight request completed despite the dead rank"
