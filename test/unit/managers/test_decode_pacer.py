"""Decode pacing's arithmetic: when the overlap loop launches the next decode step (`DecodePacer`)."""

from __future__ import annotations

import pytest

from radixlm.managers.decode_pacer import EXTRA_DECAY, MAX_EXTRA_S, MISS_STEP_S, WINDOW, DecodePacer

MS = 1e-3


def steady(pacer: DecodePacer, step_ms: float, n: int, t0: float = 100.0, build_ms: float = 0.3) -> float:
    """n steps of step_ms each, every one launched 1 ms before the previous ended; returns the last end."""
    done = t0
    for _ in range(n):
        launched = done - 1 * MS
        done += step_ms * MS
        pacer.step_done(launched, done, build_ms * MS)
    return done


def test_no_deadline_until_a_step_is_measured() -> None:
    pacer = DecodePacer(margin_s=0.5 * MS)
    assert pacer.deadline() is None
    pacer.step_done(launched_at=10.0, done_at=10.005, build_s=0.3 * MS)  # the first end seen: no step time yet
    assert pacer.deadline() is None
    pacer.step_done(launched_at=10.004, done_at=10.010, build_s=0.3 * MS)
    # the step ran from the previous end (10.005) to 10.010; lead = build 0.3 + margin 0.5 ms
    assert pacer.deadline() == pytest.approx(10.010 + 5 * MS - 0.8 * MS)


def test_deadline_uses_the_shortest_recent_step_and_the_longest_build() -> None:
    pacer = DecodePacer(margin_s=0.5 * MS)
    done = steady(pacer, 6.0, 3)
    pacer.step_done(done - 1 * MS, done + 5.0 * MS, 0.9 * MS)  # the batch shrank: a shorter step, a slow build
    done += 5.0 * MS
    assert pacer.deadline() == pytest.approx(done + 5.0 * MS - (0.9 + 0.5) * MS)
    done = steady(pacer, 7.0, WINDOW, t0=done)  # the short step and the slow build leave the window
    assert pacer.deadline() == pytest.approx(done + 7.0 * MS - 0.8 * MS)


def test_a_late_launch_is_not_counted_as_device_time() -> None:
    pacer = DecodePacer(margin_s=0.5 * MS)
    done = steady(pacer, 5.0, 3)
    # launched 2 ms after the previous step ended (the device idled): the step is 5 ms, not 7
    pacer.step_done(done + 2 * MS, done + 7 * MS, 0.3 * MS)
    assert min(pacer.steps_s) == pytest.approx(5 * MS)


def test_misses_grow_the_lead_and_in_time_steps_shrink_it() -> None:
    pacer = DecodePacer(margin_s=0.5 * MS)
    done = steady(pacer, 5.0, 3)
    base = pacer.deadline()
    pacer.missed()
    pacer.missed()
    assert pacer.extra_s == pytest.approx(2 * MISS_STEP_S)
    assert pacer.deadline() == pytest.approx(base - 2 * MISS_STEP_S)
    steady(pacer, 5.0, 1, t0=done)
    assert pacer.extra_s == pytest.approx(2 * MISS_STEP_S * EXTRA_DECAY)
    for _ in range(100):
        pacer.missed()
    assert pacer.extra_s == MAX_EXTRA_S


def test_an_unseen_end_or_a_reset_drops_the_deadline_but_keeps_the_step_times() -> None:
    pacer = DecodePacer(margin_s=0.5 * MS)
    done = steady(pacer, 5.0, 3)
    pacer.step_done(done - 1 * MS, None, 0.3 * MS)  # a prefill ran beside it, or it ended unseen
    assert pacer.deadline() is None
    pacer.step_done(done + 3 * MS, done + 20 * MS, 0.3 * MS)  # the next end seen: a deadline again, from it
    assert pacer.deadline() == pytest.approx(done + 20 * MS + 5 * MS - 0.8 * MS)
    pacer.reset()
    assert pacer.deadline() is None and list(pacer.steps_s) == pytest.approx([5 * MS, 5 * MS])
