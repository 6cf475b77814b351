"""What one streamed request measured, and the run's metrics computed from those records.

Definitions (times from the moment the request is sent):
- TTFT: arrival of the first chunk that carries at least one output token.
- E2E latency: arrival of the end of the stream.
- TPOT: (E2E - TTFT) / (output_tokens - 1), for requests with more than one output token.
- A chunk's token count is the growth of the cumulative output token count it reports;
  chunks that add no token (e.g. a final usage-only chunk) are ignored.
- ITL per token (SGLang's definition): for each chunk after the first, its gap g since the
  previous token-carrying chunk is split over the n tokens it carries: n samples of g/n.
- ITL per chunk (vLLM's definition): one sample g per chunk after the first.
  With one token per chunk the two coincide; with multi-token chunks they differ.
- Achieved concurrency: sum of E2E latencies / benchmark duration (Little's law).
- Cache hit rate: sum of usage `cached_tokens` / sum of usage `prompt_tokens`.
- Percentiles: numpy's linear interpolation over all samples of the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RequestOutput:
    success: bool = False
    error: str = ""
    prompt_len: int = 0  # from usage when the server reports it, else the dataset row
    output_len: int = 0  # usage completion_tokens when reported, else counted chunk tokens
    cached_tokens: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    chunk_times: list[float] = field(default_factory=list)  # token-carrying chunks only
    chunk_tokens: list[int] = field(default_factory=list)  # new tokens in each of them
    generated_text: str = ""

    def add_chunk(self, elapsed: float, num_new_tokens: int) -> None:
        if num_new_tokens <= 0:
            return
        if not self.chunk_times:
            self.ttft = elapsed
        self.chunk_times.append(elapsed)
        self.chunk_tokens.append(num_new_tokens)


def itl_per_token(chunk_times: list[float], chunk_tokens: list[int]) -> list[float]:
    """SGLang's ITL: each later chunk's gap divided over its tokens, one sample per token."""
    samples: list[float] = []
    for i in range(1, len(chunk_times)):
        gap = chunk_times[i] - chunk_times[i - 1]
        samples.extend([gap / chunk_tokens[i]] * chunk_tokens[i])
    return samples


def itl_per_chunk(chunk_times: list[float], chunk_tokens: list[int]) -> list[float]:
    """vLLM's ITL: one sample per later chunk, the gap since the previous chunk."""
    return [chunk_times[i] - chunk_times[i - 1] for i in range(1, len(chunk_times))]


def tpot(output: RequestOutput) -> float | None:
    if output.output_len <= 1:
        return None
    return (output.latency - output.ttft) / (output.output_len - 1)


def summarize(samples: list[float], scale: float = 1000.0) -> dict[str, float]:
    """mean/median/p90/p99/std/max of samples, scaled (seconds -> ms by default)."""
    if not samples:
        return {k: float("nan") for k in ("mean", "median", "p90", "p99", "std", "max")}
    a = np.asarray(samples, dtype=np.float64) * scale
    return {
        "mean": float(a.mean()), "median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)), "std": float(a.std()), "max": float(a.max()),
    }


def compute_metrics(outputs: list[RequestOutput], duration: float) -> dict:
    """The run's metrics from its per-request records (latency summaries in ms)."""
    done = [o for o in outputs if o.success]
    input_tokens = sum(o.prompt_len for o in done)
    output_tokens = sum(o.output_len for o in done)
    cached = sum(o.cached_tokens for o in done)
    ttfts = [o.ttft for o in done]
    per_token = [s for o in done for s in itl_per_token(o.chunk_times, o.chunk_tokens)]
    per_chunk = [s for o in done for s in itl_per_chunk(o.chunk_times, o.chunk_tokens)]
    tpots = [t for t in (tpot(o) for o in done) if t is not None]
    latencies = [o.latency for o in done]
    return {
        "duration_s": duration,
        "completed": len(done),
        "failed": len(outputs) - len(done),
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "total_cached_tokens": cached,
        "request_throughput": len(done) / duration,
        "input_throughput": input_tokens / duration,
        "output_throughput": output_tokens / duration,
        "total_throughput": (input_tokens + output_tokens) / duration,
        "concurrency": sum(latencies) / duration,
        "cache_hit_rate": cached / input_tokens if input_tokens else 0.0,
        "ttft_ms": summarize(ttfts),
        "tpot_ms": summarize(tpots),
        "itl_per_token_ms": summarize(per_token),
        "itl_per_chunk_ms": summarize(per_chunk),
        "e2e_latency_ms": summarize(latencies),
        "errors": sorted({o.error for o in outputs if not o.success})[:5],
    }


# (label, key, subkey, format) rows of the stdout table
TABLE_ROWS: list[tuple[str, str, str | None, str]] = [
    ("Successful requests", "completed", None, "{:.0f}"),
    ("Failed requests", "failed", None, "{:.0f}"),
    ("Benchmark duration (s)", "duration_s", None, "{:.2f}"),
    ("Total input tokens", "total_input_tokens", None, "{:.0f}"),
    ("Total output tokens", "total_output_tokens", None, "{:.0f}"),
    ("Request throughput (req/s)", "request_throughput", None, "{:.2f}"),
    ("Input token throughput (tok/s)", "input_throughput", None, "{:.2f}"),
    ("Output token throughput (tok/s)", "output_throughput", None, "{:.2f}"),
    ("Total token throughput (tok/s)", "total_throughput", None, "{:.2f}"),
    ("Achieved concurrency", "concurrency", None, "{:.2f}"),
    ("Prefix cache hit rate", "cache_hit_rate", None, "{:.2%}"),
] + [
    (f"{label} {stat} (ms)", key, stat, "{:.2f}")
    for label, key in [
        ("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL per token", "itl_per_token_ms"),
        ("ITL per chunk", "itl_per_chunk_ms"), ("E2E latency", "e2e_latency_ms"),
    ]
    for stat in ("mean", "median", "p90", "p99")
]


def format_table(columns: list[tuple[str, dict]]) -> str:
    """One table: a row per metric, a column per run (e.g. per request rate)."""
    width = max(len(r[0]) for r in TABLE_ROWS) + 2
    col_width = max(12, *(len(name) + 2 for name, _ in columns))
    lines = ["=" * (width + col_width * len(columns))]
    lines.append("Metric".ljust(width) + "".join(name.rjust(col_width) for name, _ in columns))
    lines.append("-" * len(lines[0]))
    for label, key, sub, fmt in TABLE_ROWS:
        cells = []
        for _, metrics in columns:
            value = metrics[key][sub] if sub else metrics[key]
            cells.append(fmt.format(value).rjust(col_width))
        lines.append(label.ljust(width) + "".join(cells))
    lines.append(lines[0])
    return "\n".join(lines)
