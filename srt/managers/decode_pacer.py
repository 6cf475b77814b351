"""Decode pacing: launch the next decode step just before the one in flight ends, not a whole step ahead.

The overlap loop used to queue decode N+1 as soon as decode N was launched, so the device nearly always
held a whole decode step behind the one running. A prefill that arrives then (launched beside, on the
high-priority stream) shares the device with the rest of N *and* all of N+1: their kernels run in the
gaps of the prefill's, and the first token waits for them (fifth session: a 2,048-token prefill took 49.1
ms of device time beside decodes against ~44 ms alone). With pacing the loop holds the next decode's
build and launch until the step in flight is expected to end, less the time building and launching take
(`lead_s`), and watches the socket meanwhile: a request that arrives in that window sees only the rest of
step N beside its prefill.

The expected end is the host time the previous step was seen done plus a decode step's device time,
the least of the last few measured (from the previous step's end to this one's: both seen by the loop
while it polls). A launch that comes after the step before it ended (the device idled: that step was
already done when the loop first looked, or ended while the loop held) grows the lead by MISS_STEP_S,
and the step's end, not seen, gives no deadline for the next launch; the lead decays back slowly while
launches are in time. Pure host arithmetic, unit-tested on its own; `OverlapLoop` owns the waiting.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

WINDOW = 4  # decode steps remembered for the step time and the build time
MISS_STEP_S = 2e-4  # added to the lead per late launch
MAX_EXTRA_S = 5e-3  # the most the lead grows over its base
EXTRA_DECAY = 0.98  # per launch in time


@dataclass
class DecodePacer:
    margin_s: float  # lead beyond the building time: the forward thread's handoff and the graph launch
    steps_s: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    builds_s: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    extra_s: float = 0.0  # grown by late launches (`missed`)
    last_done: Optional[float] = None  # host time the step before the one in flight was seen done

    def reset(self) -> None:
        """The step in flight did not run alone (a prefill beside it) or its end was not seen: no deadline
        until a step is seen done again."""
        self.last_done = None

    def step_done(self, launched_at: float, done_at: Optional[float], build_s: float) -> None:
        """A lagged decode step, launched at `launched_at` after `build_s` of building, was seen done at
        `done_at` (None: its end was not seen)."""
        if done_at is None:
            self.reset()
            return
        if self.last_done is not None:
            self.steps_s.append(done_at - max(launched_at, self.last_done))
            self.extra_s *= EXTRA_DECAY
        self.builds_s.append(build_s)
        self.last_done = done_at

    def missed(self) -> None:
        """The next step was launched after this one had ended: the device idled in between."""
        self.extra_s = min(MAX_EXTRA_S, self.extra_s + MISS_STEP_S)

    def lead_s(self) -> float:
        return max(self.builds_s, default=0.0) + self.margin_s + self.extra_s

    def deadline(self) -> Optional[float]:
        """When to build and launch the next decode step (host perf_counter time), or None: at once."""
        if self.last_done is None or not self.steps_s:
            return None
        return self.last_done + min(self.steps_s) - self.lead_s()
