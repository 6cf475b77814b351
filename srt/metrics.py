"""Prometheus metrics of the serving path (rendered by `/metrics` with `--enable-metrics`).

The TokenizerManager owns one `TokenizerMetricsCollector` and feeds it per-request
latencies and token counts as outputs arrive. Scheduler-side gauges (running and queued
requests, KV token usage, prefix-cache hit rate) are not pushed: the HTTP layer reads
them from `get_server_info()` at scrape time and hands them to `observe_scheduler_stats`.

Each collector has its own `CollectorRegistry`, so several servers or engines in one
process never clash on metric names.
"""

from __future__ import annotations

from typing import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

PREFIX = "radixlm:"

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 25.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.08,
               0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0, 5.0)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               90.0, 120.0, 180.0, 300.0, 600.0)

# get_server_info() key -> (gauge name, help text)
SCHEDULER_GAUGES = {
    "num_running_reqs": ("num_running_reqs", "Requests in the running batch"),
    "num_waiting_reqs": ("num_queue_reqs", "Requests waiting in the scheduler queue"),
    "token_usage": ("token_usage", "Fraction of KV cache token slots in use"),
    "cache_hit_rate": ("cache_hit_rate", "Prefix cache hit rate (cached / prompt tokens)"),
}


class TokenizerMetricsCollector:
    """Latency histograms, token counters and scheduler gauges, labelled e.g. by model name."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self.labels = dict(labels)
        self.registry = CollectorRegistry()
        names = list(self.labels)
        self._ttft = self._histogram("time_to_first_token_seconds", "Time to first token", TTFT_BUCKETS)
        self._itl = self._histogram("inter_token_latency_seconds", "Latency between output tokens", ITL_BUCKETS)
        self._e2e = self._histogram("e2e_request_latency_seconds", "End-to-end request latency", E2E_BUCKETS)
        self._prompt_tokens = self._counter("prompt_tokens", "Prompt tokens processed", names)
        self._generation_tokens = self._counter("generation_tokens", "Generated tokens", names)
        self._cached_tokens = self._counter("cached_tokens", "Prompt tokens served from the prefix cache", names)
        self._requests = self._counter("num_requests", "Finished requests by finish type",
                                       names + ["finish_type"])
        self._gauges = {key: Gauge(PREFIX + name, doc, names, registry=self.registry).labels(**self.labels)
                        for key, (name, doc) in SCHEDULER_GAUGES.items()}

    def _histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        metric = Histogram(PREFIX + name, doc, list(self.labels), buckets=buckets, registry=self.registry)
        return metric.labels(**self.labels)

    def _counter(self, name: str, doc: str, label_names: list[str]) -> Counter:
        return Counter(PREFIX + name, doc, label_names, registry=self.registry)

    # ---- pushed by the TokenizerManager ---------------------------------------------

    def observe_time_to_first_token(self, seconds: float) -> None:
        self._ttft.observe(seconds)

    def observe_inter_token_latency(self, seconds: float, num_tokens: int = 1) -> None:
        """`seconds` covers `num_tokens` new tokens (stream_interval > 1): one sample per token."""
        if num_tokens <= 0:
            return
        per_token = seconds / num_tokens
        for _ in range(num_tokens):
            self._itl.observe(per_token)

    def observe_e2e_request_latency(self, seconds: float) -> None:
        self._e2e.observe(seconds)

    def inc_prompt_tokens(self, n: int) -> None:
        self._prompt_tokens.labels(**self.labels).inc(n)

    def inc_generation_tokens(self, n: int) -> None:
        self._generation_tokens.labels(**self.labels).inc(n)

    def inc_cached_tokens(self, n: int) -> None:
        self._cached_tokens.labels(**self.labels).inc(n)

    def inc_requests(self, finish_type: str) -> None:
        self._requests.labels(**self.labels, finish_type=finish_type).inc()

    # ---- pulled at scrape time ------------------------------------------------------

    def observe_scheduler_stats(self, stats: Mapping[str, object]) -> None:
        """Set the gauges from a `get_server_info()` dict (missing keys leave a gauge as it was)."""
        for key, gauge in self._gauges.items():
            value = stats.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauge.set(float(value))

    def render(self) -> bytes:
        """The registry in Prometheus text exposition format."""
        return generate_latest(self.registry)
