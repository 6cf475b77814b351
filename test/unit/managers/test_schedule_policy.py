"""Admission (PrefillAdder) and ordering policies over a real RadixCache, allocator and pools."""

from __future__ import annotations

import random

import pytest
import torch

from radixlm.managers.kv_cache_manager import KVCacheManager
from radixlm.managers.schedule_batch import Req
from radixlm import server_args
from radixlm.managers.schedule_policy import SCHEDULE_POLICIES, PrefillAdder, order_queue
from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.memory_pool import ReqToTokenPool
from radixlm.mem_cache.radix_cache import RadixCache
from radixlm.sampling.sampling_params import SamplingParams


def _kv(total: int = 1000, rows: int = 8) -> KVCacheManager:
    alloc = TokenToKVPoolAllocator(total)
    pool = ReqToTokenPool(rows, 2048)
    return KVCacheManager(pool, alloc, RadixCache(pool, alloc))


def _req(rid: str, ids: list[int], max_new: int = 10) -> Req:
    return Req(rid, ids, SamplingParams(max_new_tokens=max_new, temperature=0).normalize(), seed=0)


def _cache(kv: KVCacheManager, ids: list[int]) -> None:
    slots = kv.allocator.alloc(len(ids))
    kv.tree_cache.insert(ids, slots)


def test_token_budget_counts_only_uncached_part() -> None:
    kv = _kv()
    _cache(kv, list(range(300)))
    adder = PrefillAdder(kv, [], new_token_ratio=0.0, max_prefill_tokens=150, chunked_prefill_size=-1,
                         max_new_reqs=8)
    a, b = _req("a", list(range(400))), _req("b", list(range(1000, 1100)))
    assert adder.add_one_req(a)  # 300 cached, 100 new: fits the 150-token budget
    assert a.extend_input_len == 100 and a.prefix_indices.numel() == 300
    assert not adder.add_one_req(b)  # 100 more would exceed it
    assert adder.can_run == [a]
    assert kv.tree_cache.protected_size() == 300  # a's prefix is locked, b's lock was undone


def test_fully_cached_prompt_recomputes_last_token() -> None:
    kv = _kv()
    _cache(kv, list(range(50)))
    adder = PrefillAdder(kv, [], 0.0, 1000, -1, 8)
    req = _req("a", list(range(50)))
    adder.add_one_req(req)
    assert req.prefix_indices.numel() == 49 and req.extend_input_len == 1


def test_chunking_splits_the_overflowing_request() -> None:
    kv = _kv()
    adder = PrefillAdder(kv, [], 0.0, 1000, chunked_prefill_size=64, max_new_reqs=8)
    a, b = _req("a", list(range(40))), _req("b", list(range(100, 200)))
    assert adder.add_one_req(a)
    assert not adder.add_one_req(b)
    assert adder.new_chunked_req is b and b.extend_input_len == 24


def test_memory_reservation_for_running_requests() -> None:
    kv = _kv(total=300)
    running = [_req("r", [1, 2, 3], max_new=200)]
    adder = PrefillAdder(kv, running, new_token_ratio=1.0, max_prefill_tokens=1000, chunked_prefill_size=-1,
                         max_new_reqs=8)
    assert not adder.add_one_req(_req("a", list(range(50)), max_new=60))  # 200 + 50 + 60 > 300
    adder = PrefillAdder(kv, running, new_token_ratio=0.5, max_prefill_tokens=1000, chunked_prefill_size=-1,
                         max_new_reqs=8)
    assert adder.add_one_req(_req("a", list(range(50)), max_new=60))  # 100 + 50 + 30 <= 300


def test_the_flag_accepts_exactly_the_registered_policies() -> None:
    assert set(server_args.SCHEDULE_POLICIES) == set(SCHEDULE_POLICIES)


def test_lof_orders_by_max_new_tokens_and_keeps_arrival_order_on_ties() -> None:
    kv = _kv()
    queue = [_req("a", [1], max_new=5), _req("b", [2], max_new=50), _req("c", [3], max_new=5),
             _req("d", [4], max_new=20)]
    assert [r.rid for r in order_queue("lof", queue, kv, random.Random(0))] == ["b", "d", "a", "c"]
    assert [r.rid for r in queue] == ["a", "b", "c", "d"]  # the waiting queue itself is not reordered


def test_lpm_orders_by_prefix_and_falls_back_to_fcfs() -> None:
    kv = _kv()
    _cache(kv, list(range(100)))
    queue = [_req("none", [7] * 20), _req("short", list(range(10)) + [999]), _req("long", list(range(90)) + [5])]
    assert [r.rid for r in order_queue("lpm", queue, kv, random.Random(0))] == ["long", "short", "none"]
    assert [r.rid for r in order_queue("fcfs", queue, kv, random.Random(0))] == ["none", "short", "long"]
    long_queue = queue * 50
    assert order_queue("lpm", long_queue, kv, random.Random(0)) == long_queue


def test_dfs_weight_groups_shared_prefixes_and_random_is_a_permutation() -> None:
    kv = _kv()
    _cache(kv, list(range(100)))
    _cache(kv, list(range(500, 600)))
    a1, b1, a2, b2 = (_req("a1", list(range(100)) + [1]), _req("b1", list(range(500, 600)) + [1]),
                      _req("a2", list(range(100)) + [2]), _req("b2", list(range(500, 600)) + [2]))
    order = [r.rid for r in order_queue("dfs-weight", [a1, b1, a2, b2], kv, random.Random(0))]
    assert {tuple(order[:2]), tuple(order[2:])} <= {("a1", "a2"), ("b1", "b2")}
    shuffled = order_queue("random", [a1, b1, a2, b2], kv, random.Random(1))
    assert sorted(r.rid for r in shuffled) == ["a1", "a2", "b1", "b2"]
    with pytest.raises(ValueError, match="schedule policy"):
        order_queue("nope", [a1], kv, random.Random(0))


def test_in_batch_shared_prefix_waits_one_step() -> None:
    kv = _kv(total=4000)
    system = list(range(1000, 1100))
    a, b = _req("a", system + [1, 2]), _req("b", system + [3, 4])
    short = _req("short", system[:20] + [5])  # shares fewer than IN_BATCH_PREFIX_MIN_TOKENS tokens
    other = _req("other", list(range(5000, 5100)))
    adder = PrefillAdder(kv, [], 0.0, 10000, -1, 8)
    for req in (a, b, short, other):
        assert adder.add_one_req(req)
    assert adder.can_run == [a, short, other] and adder.deferred == [b]
    assert kv.tree_cache.protected_size() == 0  # b's lock was undone
    kv.tree_cache.insert(a.fill_ids, kv.allocator.alloc(len(a.fill_ids)))  # what a's prefill leaves behind
    adder = PrefillAdder(kv, [], 0.0, 10000, -1, 8)
    assert adder.add_one_req(b) and adder.can_run == [b]
    assert b.prefix_indices.numel() == len(system) and b.extend_input_len == 2
