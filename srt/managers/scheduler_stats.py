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
    # wall time between consecutive batch results, charged to the batch just finished: where a
    # busy scheduler's time goes (decode steps vs prefills), for the throughput benchmarks
    decode_wall_s: float = 0.0
    decode_steps: int = 0
    decode_batch_size_sum: int = 0
    max_decode_batch_size: int = 0
    prefill_wall_s: float = 0.0
    prefill_steps: int = 0
    prefill_new_tokens: int = 0
    overlapped_steps: int = 0  # decode batches launched before the previous batch's results were processed
    overlapped_steps_with_queue: int = 0  # of which while requests waited (admission blocked)
    prefills_beside_decode: int = 0  # prefills launched while a decode was in flight (OverlapLoop)
    lagged_for_frees: int = 0  # decodes lagged so that a failed prefill beside could retry with releases landed
    paced_holds: int = 0  # decode launches held back by pacing (DecodePacer), of which
    paced_arrivals: int = 0  # ended early by a message (its prefill then shares the device with less decode)
    paced_late_launches: int = 0  # decode launches that came after the device finished the step before
    paced_hold_s: float = 0.0  # total time held
    started_at: float = field(default_factory=time.monotonic)
    _gen_window: list = field(default_factory=list, repr=False)  # (time, generated_tokens)
    _last_result_at: float = field(default=0.0, repr=False)

    def record_batch(self, is_decode: bool, batch_size: int, new_tokens: int) -> None:
        """One batch's results are in; the time since the previous result (capped at 1 s, so idle
        gaps are not counted) is charged to this batch's kind."""
        now = time.monotonic()
        gap = min(now - self._last_result_at, 1.0) if self._last_result_at else 0.0
        self._last_result_at = now
        if is_decode:
            self.decode_wall_s += gap
            self.decode_steps += 1
            self.decode_batch_size_sum += batch_size
            self.max_decode_batch_size = max(self.max_decode_batch_size, batch_size)
        else:
            self.prefill_wall_s += gap
            self.prefill_steps += 1
            self.prefill_new_tokens += new_tokens

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
