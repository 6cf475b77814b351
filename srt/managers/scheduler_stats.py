"""Counters the scheduler exposes through get_server_info (and the metrics scrape)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


@dataclass
class SchedulerStats:
    num_requests: int = 0
    num_finished: int = 0
    num_aborted: int = 0
    num_retractions: int = 0
    retracted_tokens_released: int = 0  # KV tokens retracted requests gave up
    retracted_tokens_kept: int = 0  # of which were inserted into the prefix tree (evictable, not freed)
    resumed_cached_tokens: int = 0  # tokens resumed requests found cached on readmission
    num_prefill_batches: int = 0
    num_decode_batches: int = 0
    prompt_tokens: int = 0  # tokens admitted for prefill (cached + computed)
    cached_tokens: int = 0  # of which came from the prefix cache
    generated_tokens: int = 0
    forward_time_s: float = 0.0
    started_at: float = field(default_factory=time.monotonic)
    _gen_window: list = field(default_factory=list, repr=False)  # (time, generated_tokens)

    def record_generated(self, n: int) -> None:
        self.generated_tokens += n
        now = time.monotonic()
        self._gen_window.append((now, self.generated_tokens))
        while self._gen_window and now - self._gen_window[0][0] > 10.0:
            self._gen_window.pop(0)

    def generation_throughput(self) -> float:
        if len(self._gen_window) < 2:
            return 0.0
        (t0, n0), (t1, n1) = self._gen_window[0], self._gen_window[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def cache_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def reset_cache_counters(self) -> None:
        self.prompt_tokens = 0
        self.cached_tokens = 0

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if not k.startswith("_") and k != "started_at"}
        out["cache_hit_rate"] = round(self.cache_hit_rate(), 4)
        out["gen_throughput"] = round(self.generation_throughput(), 2)
        out["uptime_s"] = round(time.monotonic() - self.started_at, 1)
        return out
