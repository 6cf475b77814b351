"""bench_serving.py end to end: the tool run as a script (and once as `python -m radixlm.bench_serving`)
against the shared real CPU server (`http_server` in conftest.py: SmolLM2 on loopback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import ServerHandle

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH = REPO_ROOT / "benchmark" / "bench_serving.py"
pytestmark = pytest.mark.slow


def run_bench(server: ServerHandle, out_file: Path, *flags: str, as_module: bool = False,
              cwd: Path = REPO_ROOT) -> tuple[str, list[dict]]:
    tool = ["-m", "radixlm.bench_serving"] if as_module else [str(BENCH)]
    cmd = [sys.executable, *tool, "--base-url", server.base_url, "--api-key", server.api_key,
           "--output-file", str(out_file), "--output-details", "--disable-tqdm", *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout, [json.loads(line) for line in out_file.read_text().splitlines()]


def test_random_dataset_native_backend(http_server: ServerHandle, tmp_path: Path) -> None:
    stdout, records = run_bench(
        http_server, tmp_path / "random.jsonl", "--backend", "radixlm", "--dataset-name", "random",
        "--num-prompts", "16", "--random-input-len", "64", "--random-output-len", "8",
        "--random-range-ratio", "0.5", "--request-rate", "inf", "--max-concurrency", "8")
    assert "Successful requests" in stdout and "ITL per token median (ms)" in stdout
    assert "style=sglang input_len~U[32, 64]" in stdout
    (record,) = records
    assert record["completed"] == 16 == record["dataset"]["num_requests"] and record["failed"] == 0
    details = record["details"]
    assert record["total_output_tokens"] == sum(details["output_lens"])
    # ignore_eos: every request produced exactly the output length it asked for
    assert record["total_output_tokens"] == pytest.approx(16 * record["dataset"]["mean_output_len"])
    assert record["total_input_tokens"] == sum(details["prompt_lens"])
    assert record["version"] and record["settings"]["random_range_ratio"] == 0.5
    assert record["server_info"] is not None
    assert record["ttft_ms"]["median"] > 0 and record["itl_per_token_ms"]["median"] > 0
    assert 0 < record["concurrency"] <= 8


def test_shared_prefix_dataset_hits_the_cache_openai_backend(http_server: ServerHandle, tmp_path: Path) -> None:
    stdout, records = run_bench(
        http_server, tmp_path / "gsp.jsonl", "--backend", "openai", "--dataset-name", "generated-shared-prefix",
        "--gsp-num-groups", "4", "--gsp-prompts-per-group", "4", "--gsp-system-prompt-len", "128",
        "--gsp-question-len", "16", "--gsp-output-len", "8", "--max-concurrency", "4", "--flush-cache")
    # At most 4 in flight: every later request finds its group's system prompt already cached
    # (16 prompts arriving at once could all be prefilled in one batch, sharing nothing).
    assert "Prefix cache hit rate" in stdout
    (record,) = records
    assert record["completed"] == 16 and record["failed"] == 0
    assert record["total_output_tokens"] == sum(record["details"]["output_lens"]) == 16 * 8
    assert record["total_cached_tokens"] == sum(record["details"]["cached_tokens"])
    assert record["cache_hit_rate"] > 0


def test_chat_backend_sweep_writes_a_record_per_rate(http_server: ServerHandle, tmp_path: Path) -> None:
    """Run as `python -m radixlm.bench_serving` from outside the checkout: the installed package's name."""
    plot = tmp_path / "sweep.png"
    stdout, records = run_bench(
        http_server, tmp_path / "sweep.jsonl", "--backend", "openai-chat", "--dataset-name", "random",
        "--num-prompts", "4", "--random-input-len", "32", "--random-output-len", "4",
        "--random-range-ratio", "1", "--sweep-rates", "2,inf", "--plot", str(plot), as_module=True, cwd=tmp_path)
    assert "rate=2" in stdout and "rate=inf" in stdout
    assert [r["request_rate"] for r in records] == [2.0, "inf"]
    assert all(r["completed"] == 4 and r["total_output_tokens"] == 16 for r in records)
    assert plot.stat().st_size > 0
