"""Greedy outputs do not depend on how the scheduler runs them (issue 4), on the real SmolLM2.

One engine per scheduler configuration, started and shut down in turn (module-scoped,
parametrized): the overlap loop on (the reference) and off, mixed chunks, and every
policy (fcfs, lpm, lof, dfs-weight, random); a few configurations combine features to save
start-ups, while overlap on/off differ in nothing else. Each must give exactly the reference's greedy
outputs on the e2e prompt set, with few running requests so the policies really reorder.
The same engines show that `lpm` raises the hit rate on a shuffled shared-prefix workload
in a KV pool too small to keep every prefix, and that requests sharing a long prefix
submitted together compute it once (in-batch prefix sharing). The leak check runs after each.
"""

from __future__ import annotations

import random
from typing import Iterator

import pytest

import radixlm

pytestmark = pytest.mark.slow

PROMPTS = [
    "The capital of France is",
    "Write a haiku about the sea.",
    "def fibonacci(n):\n    ",
    "List three colors: red,",
    "Once upon a time, in a land far away, there lived a dragon who loved to read books about",
    "1, 2, 3, 4, 5,",
    "Translate to French: Good morning, my friend.",
    "Q: What is the boiling point of water in Celsius?\nA:",
]
MAX_NEW = [12, 5, 16, 3, 9, 14, 7, 10]  # staggered finishes
BASE = dict(max_total_tokens=600, max_running_requests=3, log_level="warning")
CONFIGS = {  # the last two combine features to save engine start-ups (each must still match)
    "overlap-fcfs": {},
    "no-overlap": {"disable_overlap_schedule": True},
    "lpm": {"schedule_policy": "lpm"},
    "lof": {"schedule_policy": "lof"},
    "mixed-chunk-random": {"enable_mixed_chunk": True, "chunked_prefill_size": 8, "schedule_policy": "random"},
    "dfs-weight": {"schedule_policy": "dfs-weight", "disable_overlap_schedule": True, "max_total_tokens": 20000,
                   "max_running_requests": 32},
}
GROUPS, GROUP_SIZE, GROUP_PREFIX = 4, 4, 200  # 4 prefixes of 200 tokens; the 600-token pool keeps about two
results: dict[str, dict] = {}  # config -> what it produced, compared by the later tests


def greedy(max_new: int) -> dict:
    return {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module", params=list(CONFIGS))
def engine(request: pytest.FixtureRequest) -> Iterator[tuple[str, radixlm.Engine]]:
    with radixlm.Engine(**{**BASE, **CONFIGS[request.param]}) as eng:
        yield request.param, eng
        info = eng.get_server_info()
        assert not info["memory_leak"], info["memory_leak_message"]
        assert info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0


def shared_prefix_workload() -> list[list[int]]:
    rng = random.Random(7)
    prefixes = [[rng.randrange(1000 + 5000 * g, 5000 * (g + 1)) for _ in range(GROUP_PREFIX)] for g in range(GROUPS)]
    prompts = [p + [rng.randrange(30000, 40000) for _ in range(12)] for p in prefixes for _ in range(GROUP_SIZE)]
    rng.shuffle(prompts)
    return prompts


def test_greedy_outputs_match_across_configs(engine: tuple[str, radixlm.Engine]) -> None:
    name, eng = engine
    outs = eng.generate(PROMPTS, [greedy(n) for n in MAX_NEW])
    got = [o["output_ids"] for o in outs]
    assert [len(g) for g in got] == MAX_NEW
    results.setdefault(name, {})["outputs"] = got
    assert got == results["overlap-fcfs"]["outputs"], f"{name} differs from the overlap/fcfs reference"
    if name == "overlap-fcfs":  # 8 requests, 3 may run: decode keeps the overlap while the rest wait
        info = eng.get_server_info()
        assert info["overlapped_steps_with_queue"] > 0 and info["overlapped_steps"] > 0, info


def test_policy_hit_rate_on_shuffled_shared_prefixes(engine: tuple[str, radixlm.Engine]) -> None:
    name, eng = engine
    if name not in ("overlap-fcfs", "lpm"):
        pytest.skip("compared between fcfs and lpm only")
    assert eng.flush_cache()
    prompts = shared_prefix_workload()
    outs = eng.generate(input_ids=prompts, sampling_params=greedy(2))
    hit = sum(o["meta_info"]["cached_tokens"] for o in outs) / sum(len(p) for p in prompts)
    results.setdefault(name, {})["hit_rate"] = hit
    if name == "lpm":
        fcfs = results["overlap-fcfs"]["hit_rate"]
        assert hit > fcfs + 0.05, f"lpm hit rate {hit:.2f} vs fcfs {fcfs:.2f}"  # seen: 0.71 vs 0.59


def test_in_batch_prefix_sharing_computes_a_shared_prefix_once(engine: tuple[str, radixlm.Engine]) -> None:
    name, eng = engine
    if name != "dfs-weight":  # this engine has room to admit all 16 at once
        pytest.skip("runs on the large-pool engine")
    assert eng.flush_cache()
    rng = random.Random(3)
    system = [rng.randrange(1000, 40000) for _ in range(1000)]
    prompts = [system + [rng.randrange(1000, 40000) for _ in range(16)] for _ in range(16)]
    outs = eng.generate(input_ids=prompts, sampling_params=greedy(2))
    cached = sorted(o["meta_info"]["cached_tokens"] for o in outs)
    assert cached[0] == 0 and all(c >= len(system) for c in cached[1:]), cached
