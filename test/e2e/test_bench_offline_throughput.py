"""benchmark/bench_offline_throughput.py's warm-up and its per-run step profile, on a real Engine (tiny random
Llama on the CPU): the warm-up runs the workload's first requests untimed, and the timed run's counters
exclude it."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

import radixlm
from radixlm.benchmark import bench_offline_throughput as bench

pytestmark = pytest.mark.slow

NUM, OUT = 16, 8


def test_stats_since_subtracts_counters_and_keeps_maxima_and_settings() -> None:
    before = {"decode_steps": 3, "generated_tokens": 64, "max_decode_batch_size": 16, "max_total_tokens": 4096}
    after = {"decode_steps": 10, "generated_tokens": 192, "max_decode_batch_size": 16, "max_total_tokens": 4096}
    assert bench.stats_since(before, after) == {"decode_steps": 7, "generated_tokens": 128,
                                                "max_decode_batch_size": 16, "max_total_tokens": 4096}


def test_memory_line_only_where_the_device_reports_a_peak(capsys: pytest.CaptureFixture) -> None:
    run = {"decode_steps": 2, "prefill_steps": 1, "decode_wall_s": 0.5, "decode_batch_size_sum": 4,
           "max_decode_batch_size": 2, "prefill_wall_s": 0.1, "prefill_new_tokens": 100, "max_total_num_tokens": 900}
    bench.print_step_profile({**run, "memory": {"weights_gib": 0.5, "peak_reserved_gib": None}})
    assert "memory:" not in capsys.readouterr().out  # the CPU: no allocator peak to report
    cuda = {"device_total_gib": 139.8, "mem_fraction_static": 0.88, "weights_gib": 14.96, "kv_cache_gib": 107.4,
            "req_to_token_gib": 1.0, "peak_reserved_gib": 126.4, "peak_other_gib": 3.04, "device_free_gib": 12.5}
    bench.print_step_profile({**run, "memory": cuda})
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("memory: 139.8 GiB device") and "KV pool 107.40 (900 tokens)" in line
    assert "other (activations, graphs, sampling) 3.04; free on the device 12.50" in line


def test_warm_up_is_untimed_and_left_out_of_the_run(tmp_path: Path, smollm2_dir: str,
                                                     tiny_llama_maker: Callable) -> None:
    model = tiny_llama_maker(tmp_path / "tiny", smollm2_dir, vocab_size=1024, max_position_embeddings=2048,
                             bos_token_id=None, eos_token_id=None)
    work = bench.workload_b(NUM, 1024, seed=0, output_len=OUT)
    with radixlm.Engine(model_path=model, max_total_tokens=8192, log_level="warning") as engine:
        bench.warm_up(engine, work, NUM)
        before = engine.get_server_info()
        assert before["generated_tokens"] == NUM * 4  # the warm-up's requests, capped at 4 tokens each
        result = bench.run_engine(engine, work)
        run = bench.stats_since(before, engine.get_server_info())
        assert engine.get_server_info()["memory_leak"] is False
    assert result.output_tokens == NUM * OUT == run["generated_tokens"]
    assert run["num_finished"] == NUM and run["decode_batch_size_sum"] == NUM * (OUT - 1)
    # the run flushed the warm-up's cache: its first request computes the shared system prompt again
    assert run["prefill_new_tokens"] > 1000 and 0 < result.cache_hit_rate < 1
