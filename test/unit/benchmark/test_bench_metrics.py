"""bench_serving's definitions: the two ITLs, TPOT, Poisson arrivals, the table, the plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from radixlm.benchmark.bench_serving import arrival_times, parse_args, parse_rates
from radixlm.benchmark.serving_metrics import (
    RequestOutput, compute_metrics, format_table, itl_per_chunk, itl_per_token,
)

# A stream whose chunks carry 1, 3, (0), 4 and 1 tokens; the empty chunk must be ignored.
STREAM = [(0.10, 1), (0.16, 3), (0.20, 0), (0.40, 4), (0.43, 1)]


def synthetic_output() -> RequestOutput:
    out = RequestOutput(success=True, prompt_len=20, output_len=9, cached_tokens=5, latency=0.45)
    for elapsed, n in STREAM:
        out.add_chunk(elapsed, n)
    return out


def test_two_itl_definitions_on_multi_token_chunks() -> None:
    out = synthetic_output()
    assert out.ttft == 0.10 and out.chunk_tokens == [1, 3, 4, 1]
    # gaps 0.06 over 3 tokens, 0.24 over 4, 0.03 over 1
    assert itl_per_token(out.chunk_times, out.chunk_tokens) == pytest.approx([0.02] * 3 + [0.06] * 4 + [0.03])
    assert itl_per_chunk(out.chunk_times, out.chunk_tokens) == pytest.approx([0.06, 0.24, 0.03])


def test_metrics_summaries_match_hand_computed_values() -> None:
    m = compute_metrics([synthetic_output(), RequestOutput(error="HTTP 500")], duration=2.0)
    assert (m["completed"], m["failed"], m["total_output_tokens"]) == (1, 1, 9)
    assert m["itl_per_token_ms"]["mean"] == pytest.approx(330 / 8)
    assert m["itl_per_token_ms"]["median"] == pytest.approx(45.0)  # between 30 and 60
    assert m["itl_per_chunk_ms"]["mean"] == pytest.approx(110.0)
    assert m["itl_per_chunk_ms"]["median"] == pytest.approx(60.0)
    assert m["tpot_ms"]["mean"] == pytest.approx(350 / 8)
    assert m["ttft_ms"]["median"] == pytest.approx(100.0)
    assert m["concurrency"] == pytest.approx(0.45 / 2.0)
    assert m["cache_hit_rate"] == pytest.approx(0.25)
    assert m["output_throughput"] == pytest.approx(4.5)
    assert m["errors"] == ["HTTP 500"]


def test_one_token_chunks_make_the_definitions_agree() -> None:
    times, tokens = [0.1, 0.2, 0.35, 0.4], [1, 1, 1, 1]
    assert itl_per_token(times, tokens) == pytest.approx(itl_per_chunk(times, tokens))


def test_poisson_mean_inter_arrival() -> None:
    rng = np.random.default_rng(0)
    for rate in (0.5, 4.0, 100.0):
        offsets = arrival_times(rate, 10_001, rng)
        assert offsets[0] == 0.0 and np.all(np.diff(offsets) >= 0)
        assert np.diff(offsets).mean() == pytest.approx(1 / rate, rel=0.05)
    assert np.all(arrival_times(float("inf"), 10, rng) == 0)


def test_rates_and_flags() -> None:
    assert parse_rates("1,2,4,inf") == [1.0, 2.0, 4.0, float("inf")]
    with pytest.raises(ValueError, match="positive"):
        parse_rates("0,1")
    args = parse_args(["--port", "30123", "--sweep-rates", "1,2"])
    assert args.base_url == "http://127.0.0.1:30123" and args.rates == [1.0, 2.0]
    with pytest.raises(ValueError, match=r"vllm style.*got 1\.0"):
        parse_args(["--range-ratio-style", "vllm", "--random-range-ratio", "1"])
    with pytest.raises(ValueError, match="--tokenize-prompt"):
        parse_args(["--backend", "openai-chat", "--tokenize-prompt"])


def test_table_has_a_column_per_rate() -> None:
    m = compute_metrics([synthetic_output()], duration=1.0)
    table = format_table([("rate=1", m), ("rate=2", m)])
    assert "rate=1" in table and "rate=2" in table
    assert "ITL per token median (ms)" in table and "ITL per chunk p99 (ms)" in table


def test_plot_writes_a_png(tmp_path: Path) -> None:
    from radixlm.benchmark.serving_plot import plot_runs

    runs = [(f"rate={r}", {"request_rate": r, **compute_metrics([synthetic_output()], 1.0)}, [synthetic_output()])
            for r in (1, 2)]
    path = tmp_path / "plot.png"
    plot_runs(str(path), runs, "synthetic")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
