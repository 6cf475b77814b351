"""`/metrics` (--enable-metrics) parses as Prometheus text and moves with traffic."""

from __future__ import annotations

from typing import Any

try:
    import httpx
except ImportError:  # some openai builds vendor it as httpx2 (same API)
    import httpx2 as httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow


def scrape(base_url: str) -> dict[str, float]:
    """Sample name -> value (summed over label sets)."""
    response = httpx.get(f"{base_url}/metrics", timeout=60)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def test_metrics_parse_and_move(http_server: Any) -> None:
    before = scrape(http_server.base_url)
    for name in ("radixlm:num_running_reqs", "radixlm:num_queue_reqs", "radixlm:token_usage",
                 "radixlm:cache_hit_rate", "radixlm:time_to_first_token_seconds_bucket",
                 "radixlm:inter_token_latency_seconds_bucket", "radixlm:e2e_request_latency_seconds_bucket"):
        assert name in before, sorted(before)
    headers = {"Authorization": f"Bearer {http_server.api_key}"}
    body = {"model": "default", "prompt": "Metrics are", "max_tokens": 3, "temperature": 0}
    out = httpx.post(f"{http_server.base_url}/v1/completions", json=body, headers=headers, timeout=300)
    assert out.status_code == 200
    # Only a stream gets per-step outputs, hence inter-token latencies.
    with httpx.stream("POST", f"{http_server.base_url}/v1/completions", json={**body, "stream": True},
                      headers=headers, timeout=300) as response:
        assert sum(line.startswith("data: ") for line in response.iter_lines()) >= 3
    after = scrape(http_server.base_url)
    prompt_tokens = out.json()["usage"]["prompt_tokens"]
    assert after["radixlm:prompt_tokens_total"] - before.get("radixlm:prompt_tokens_total", 0) >= 2 * prompt_tokens
    assert after["radixlm:generation_tokens_total"] - before.get("radixlm:generation_tokens_total", 0) >= 6
    assert after["radixlm:e2e_request_latency_seconds_count"] - \
        before.get("radixlm:e2e_request_latency_seconds_count", 0) >= 2
    assert after["radixlm:time_to_first_token_seconds_count"] > before["radixlm:time_to_first_token_seconds_count"]
    assert after["radixlm:inter_token_latency_seconds_count"] > before["radixlm:inter_token_latency_seconds_count"]
    assert 0.0 <= after["radixlm:token_usage"] <= 1.0
