"""The scheduler under pressure (issue 4): retraction that keeps prefixes, mixed chunks, aborts.

One small-memory engine (`--max-total-tokens 700`, low conservativeness so admission
over-commits, mixed chunk on, 48-token chunks, lpm): 16 concurrent requests must retract
and resume, and still produce exactly what each produces alone; a retracted request's
computed tokens stay cached (pinned while it waits) and it hits them when it resumes;
50 streams aborted mid-generation give every slot back. The leak check must pass after
each test.
"""

from __future__ import annotations

import random
import time
from typing import Iterator

import pytest

import radixlm

pytestmark = pytest.mark.slow

NUM_REQS = 16
PROMPT_LEN = 40
MAX_NEW = 32  # 16 x (40 + 32) tokens against a 700-token pool: several retractions
UNPRESSURED_GROUP = 8  # the reference runs 8 at a time (8 x 72 = 576 of 700 tokens): no retraction


@pytest.fixture(scope="module")
def engine() -> Iterator[radixlm.Engine]:
    with radixlm.Engine(max_total_tokens=700, schedule_conservativeness=0.3, enable_mixed_chunk=True,
                        chunked_prefill_size=48, schedule_policy="lpm", log_level="warning") as eng:
        yield eng


@pytest.fixture(autouse=True)
def leak_check(engine: radixlm.Engine) -> Iterator[None]:
    yield
    info = engine.get_server_info()
    assert not info["memory_leak"], info["memory_leak_message"]
    assert info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0


def _prompts() -> list[list[int]]:
    rng = random.Random(1)  # disjoint random prompts: any cache hit is a request's own prefix
    prompts = [[rng.randrange(1000, 40000) for _ in range(PROMPT_LEN)] for _ in range(NUM_REQS)]
    assert len({p[0] for p in prompts}) == NUM_REQS  # no two share even a first token
    return prompts


def test_retraction_keeps_outputs_and_prefixes(engine: radixlm.Engine) -> None:
    params = {"max_new_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True}
    prompts = _prompts()
    before = engine.get_server_info()["num_retractions"]
    alone = []
    for i in range(0, NUM_REQS, UNPRESSURED_GROUP):
        alone += [o["output_ids"] for o in engine.generate(input_ids=prompts[i:i + UNPRESSURED_GROUP],
                                                           sampling_params=params)]
    assert engine.get_server_info()["num_retractions"] == before, "the reference run must be unpressured"
    assert engine.flush_cache()
    start = engine.get_server_info()
    together = engine.generate(input_ids=prompts, sampling_params=params)
    info = engine.get_server_info()
    delta = {k: info[k] - start[k] for k in ("num_retractions", "retracted_tokens_kept",
                                             "retracted_tokens_released", "resumed_cached_tokens")}
    assert delta["num_retractions"] >= 3, "the workload should have forced several retractions"
    assert [o["output_ids"] for o in together] == alone
    metas = [o["meta_info"] for o in together]
    assert all(m["finish_reason"]["type"] == "length" for m in metas)
    retracted = [m for m in metas if m["retractions"] > 0]
    assert retracted
    # Retraction inserts what the request computed into the tree before releasing it (issue 4):
    kept, released = delta["retracted_tokens_kept"], delta["retracted_tokens_released"]
    assert kept > 0 and kept <= released, (kept, released)
    # ... pinned while the request waits, so it hits its own prefix on resume. The prompts share
    # nothing and the cache was flushed, so every cached token a request reports is such a hit:
    print("retracted requests (retractions, cached tokens):",
          [(m["retractions"], m["cached_tokens"]) for m in retracted], delta)
    assert sum(m["cached_tokens"] for m in metas) == delta["resumed_cached_tokens"]
    assert any(m["cached_tokens"] > 0 for m in retracted), "no retracted request hit its retained prefix"


def test_abort_fifty_streams_mid_generation(engine: radixlm.Engine) -> None:
    rng = random.Random(2)
    streams = [engine.generate(input_ids=[rng.randrange(1000, 40000) for _ in range(8)],
                               sampling_params={"max_new_tokens": 64, "temperature": 0, "ignore_eos": True},
                               stream=True) for _ in range(50)]
    first = [next(s) for s in streams[:5]]  # some are generating when we walk away
    assert all(c["meta_info"]["finish_reason"] is None for c in first)
    for s in streams:
        s.close()
    out = engine.generate("Hello", {"max_new_tokens": 3, "temperature": 0})
    assert out["meta_info"]["completion_tokens"] == 3
    deadline = time.monotonic() + 30  # aborts are asynchronous: each leaves at its next step
    while (info := engine.get_server_info())["num_running_reqs"] + info["num_waiting_reqs"] and \
            time.monotonic() < deadline:
        time.sleep(0.5)
    assert info["num_running_reqs"] + info["num_waiting_reqs"] == 0, info["num_running_reqs"]
    assert info["num_aborted"] >= 45


def test_abort_by_rid_reports_abort(engine: radixlm.Engine) -> None:
    import threading

    timer = threading.Timer(1.0, lambda: engine.abort_request("to-abort"))
    timer.start()
    out = engine.generate(input_ids=[5000] * 20, rid="to-abort",
                          sampling_params={"max_new_tokens": 400, "temperature": 0, "ignore_eos": True})
    timer.join()
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert out["meta_info"]["completion_tokens"] < 400
