"""TokenizerMetricsCollector renders parseable Prometheus text that moves with observations."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from radixlm.metrics import TokenizerMetricsCollector


def samples(collector: TokenizerMetricsCollector) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(collector.render().decode()):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def test_collectors_are_independent_and_move() -> None:
    a = TokenizerMetricsCollector({"model_name": "m"})
    b = TokenizerMetricsCollector({"model_name": "m"})  # no duplicate-registration error
    a.observe_time_to_first_token(0.05)
    a.observe_inter_token_latency(0.03, num_tokens=3)
    a.observe_e2e_request_latency(1.2)
    a.inc_prompt_tokens(11)
    a.inc_generation_tokens(4)
    a.inc_cached_tokens(5)
    a.inc_requests("stop")
    a.observe_scheduler_stats({"num_running_reqs": 2, "num_waiting_reqs": 1, "token_usage": 0.25,
                               "cache_hit_rate": 0.5, "memory_leak": False})
    got = samples(a)
    assert got["radixlm:time_to_first_token_seconds_count"] == 1
    assert got["radixlm:inter_token_latency_seconds_count"] == 3
    assert got["radixlm:e2e_request_latency_seconds_count"] == 1
    assert got["radixlm:prompt_tokens_total"] == 11 and got["radixlm:generation_tokens_total"] == 4
    assert got["radixlm:cached_tokens_total"] == 5 and got["radixlm:num_requests_total"] == 1
    assert (got["radixlm:num_running_reqs"], got["radixlm:num_queue_reqs"]) == (2, 1)
    assert (got["radixlm:token_usage"], got["radixlm:cache_hit_rate"]) == (0.25, 0.5)
    assert samples(b)["radixlm:time_to_first_token_seconds_count"] == 0
