"""RadixCache: matching, splitting, insertion, locks, structural LRU eviction, request hooks."""

from __future__ import annotations

import torch

from cache_reqs import SimpleReq, make_pools, prefill
from radixlm.mem_cache.radix_cache import RadixCache


def new_cache(size: int = 4096, disable: bool = False) -> RadixCache:
    pool, alloc = make_pools(size)
    return RadixCache(pool, alloc, disable=disable)


def put(cache: RadixCache, tokens: list[int], extra_key: str | None = None) -> tuple[int, torch.Tensor]:
    """Insert with fresh slots; free the duplicates like a caller would."""
    alloc = cache.token_to_kv_pool_allocator
    slots = alloc.alloc(len(tokens))
    cached = cache.insert(tokens, slots, extra_key)
    alloc.free(slots[:cached])
    return cached, slots


def assert_healthy(cache: RadixCache, idle: bool = True) -> None:
    assert cache.check_invariants(expect_idle=idle, check_slots=True) == []


def test_split_on_partial_match() -> None:
    cache = new_cache()
    _, slots = put(cache, [1, 2, 3, 4, 5, 6])
    m = cache.match_prefix([1, 2, 3, 7])
    assert m.device_indices.tolist() == slots[:3].tolist()
    assert m.last_node.key == [1, 2, 3]
    (child,) = m.last_node.children.values()
    assert child.key == [4, 5, 6] and child.value.tolist() == slots[3:].tolist()
    assert m.last_node.parent is cache.root_node
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 7]).device_indices.tolist() == slots.tolist()
    assert_healthy(cache)


def test_insert_returns_cached_length() -> None:
    cache = new_cache()
    assert put(cache, [5, 6, 7])[0] == 0
    assert put(cache, [5, 6, 7, 8, 9])[0] == 3
    assert put(cache, [5, 6, 1])[0] == 2
    assert put(cache, [5, 6, 7, 8, 9])[0] == 5
    assert put(cache, [5])[0] == 1
    assert cache.total_size() == 6
    assert_healthy(cache)


def test_empty_and_tensor_inputs() -> None:
    cache = new_cache()
    assert cache.match_prefix([]).device_indices.numel() == 0
    assert cache.match_prefix([]).last_node is cache.root_node
    _, slots = put(cache, [3, 1, 4, 1, 5])
    m = cache.match_prefix(torch.tensor([3, 1, 4, 2]))
    assert m.device_indices.dtype == torch.int64 and m.device_indices.tolist() == slots[:3].tolist()


def test_extra_key_isolation() -> None:
    cache = new_cache()
    _, plain = put(cache, [1, 2, 3])
    assert put(cache, [1, 2, 3], extra_key="tenant-a")[0] == 0
    _, salted = put(cache, [1, 2, 3, 4], extra_key="tenant-a")
    assert cache.match_prefix([1, 2, 3, 4]).device_indices.tolist() == plain.tolist()
    assert cache.match_prefix([1, 2, 3, 4], extra_key="tenant-b").device_indices.numel() == 0
    a = cache.match_prefix([1, 2, 3, 4], extra_key="tenant-a").device_indices
    assert a.numel() == 4 and set(a.tolist()).isdisjoint(plain.tolist())
    assert cache.total_size() == 7
    assert_healthy(cache)


def test_lock_protects_path_and_sizes_move() -> None:
    cache = new_cache()
    put(cache, [1, 2, 3, 4])
    put(cache, [1, 2, 9])
    m = cache.match_prefix([1, 2, 3, 4])
    assert cache.inc_lock_ref(m.last_node) == -4  # [1, 2] and [3, 4]
    assert (cache.evictable_size(), cache.protected_size()) == (1, 4)
    assert cache.evict(100) == 1  # only [9] may go
    assert cache.match_prefix([1, 2, 3, 4]).device_indices.numel() == 4
    assert_healthy(cache, idle=False)
    assert cache.dec_lock_ref(m.last_node) == 4
    assert (cache.evictable_size(), cache.protected_size()) == (4, 0)
    assert cache.evict(100) == 4 and cache.total_size() == 0
    assert_healthy(cache)


def path_of(node) -> list[int]:
    tokens: list[int] = []
    while node.parent is not None:
        tokens = node.key + tokens
        node = node.parent
    return tokens


def test_evict_lru_order_among_leaves() -> None:
    cache = new_cache()
    for first in (1, 2, 3):
        put(cache, [first, 0, 0])
    cache.match_prefix([3, 0])  # splits [3,0,0]; touches [3,0] but not its tail [0]
    cache.match_prefix([1, 0, 0])
    order = []
    while cache.total_size():
        paths = {id(n): path_of(n) for n in cache.evictable_leaves()}
        assert cache.evict(1) >= 1
        gone = set(paths) - {id(n) for n in cache.evictable_leaves()}
        order.extend(paths[i] for i in gone)
    assert order == [[2, 0, 0], [3, 0, 0], [3, 0], [1, 0, 0]]
    assert_healthy(cache)


def test_evict_cuts_only_the_tail_it_needs_from_a_pinned_leaf() -> None:
    cache = new_cache(size=64)
    alloc = cache.token_to_kv_pool_allocator
    _, slots = put(cache, list(range(10)))
    pin = cache.pin(cache.match_prefix(list(range(10))).last_node)
    assert cache.evict(4) == 4 and alloc.available_size() == 64 - 6
    match = cache.match_prefix(list(range(10)))
    assert match.device_indices.tolist() == slots[:6].tolist()  # the head is still shared exactly
    assert cache.evictable_leaves() == {match.last_node} and pin.node is match.last_node
    assert_healthy(cache, idle=False)
    cache.unpin(pin)
    assert cache.evict(1) == 6  # unpinned: whole leaves, as before
    assert_healthy(cache)


def test_parent_joins_evictable_set_only_after_last_child() -> None:
    cache = new_cache()
    put(cache, [1, 2, 3])
    put(cache, [1, 2, 4])
    parent = cache.match_prefix([1, 2]).last_node
    assert parent not in cache.evictable_leaves() and len(cache.evictable_leaves()) == 2
    assert cache.evict(1) == 1
    assert parent not in cache.evictable_leaves() and len(cache.evictable_leaves()) == 1
    assert cache.evict(1) == 1
    assert cache.evictable_leaves() == {parent}
    assert cache.evict(1) == 2 and cache.total_size() == 0
    assert_healthy(cache)


def test_evict_returns_slots_to_allocator() -> None:
    cache = new_cache(size=64)
    alloc = cache.token_to_kv_pool_allocator
    for i in range(4):
        put(cache, [i] * 10)
    assert alloc.available_size() == 24
    assert cache.evict(15) == 20  # whole leaves: two of them
    assert alloc.available_size() == 44
    assert cache.evict(1000) == 20 and alloc.available_size() == 64
    assert_healthy(cache)


def test_cache_finished_req_keeps_prompt_and_outputs() -> None:
    cache = new_cache()
    req = SimpleReq(list(range(10, 30)))
    assert prefill(cache, req) == 0
    req.output_ids = [7, 8, 9]  # the last output has no KV yet
    row = req.req_pool_idx
    slots = cache.token_to_kv_pool_allocator.alloc(2)
    cache.req_to_token_pool.write(row, 20, slots)
    req.kv_committed_len = 22
    cache.cache_finished_req(req)
    assert req.req_pool_idx is None and req.last_node is None
    assert cache.match_prefix(list(range(10, 30)) + [7, 8, 9]).device_indices.numel() == 22
    assert_healthy(cache)


def test_retracted_prefix_is_evicted_after_every_unpinned_leaf() -> None:
    cache = new_cache(size=64)
    retracted = SimpleReq(list(range(100, 120)))
    prefill(cache, retracted)
    pin = cache.cache_retracted_req(retracted)  # kept and pinned; the request waits
    assert retracted.req_pool_idx is None and cache.num_pins() == 1
    finished = SimpleReq(list(range(200, 220)))
    prefill(cache, finished)
    cache.cache_finished_req(finished)  # newer than the retracted prefix: plain LRU would keep it
    assert cache.evict(25) == 25  # all 20 unpinned tokens, then only the pinned prefix's tail
    assert cache.match_prefix(list(range(200, 220))).device_indices.numel() == 0
    assert cache.match_prefix(list(range(100, 120))).device_indices.numel() == 15
    assert_healthy(cache, idle=False)
    cache.evict(1000)  # pinned leaves still go when nothing else is left: no deadlock
    assert cache.total_size() == 0 and pin.node is cache.root_node  # the pin moved up as its path went
    cache.unpin(pin)
    assert cache.num_pins() == 0
    assert_healthy(cache)


def test_pin_dropped_makes_the_prefix_plain_lru_again() -> None:
    cache = new_cache(size=64)
    a, b = SimpleReq([1] * 10), SimpleReq([2] * 10)
    prefill(cache, a)
    pin = cache.cache_retracted_req(a)
    prefill(cache, b)
    cache.cache_finished_req(b)
    cache.unpin(pin)  # readmitted, finished or aborted
    assert cache.evict(10) == 10
    assert cache.match_prefix([1] * 10).device_indices.numel() == 0  # the older one went first
    assert cache.match_prefix([2] * 10).device_indices.numel() == 10
    assert_healthy(cache)


def test_cache_finished_req_frees_duplicates() -> None:
    cache = new_cache(size=100)
    a, b = SimpleReq([1, 2, 3, 4, 5]), SimpleReq([1, 2, 3, 4, 5, 6])
    prefill(cache, a)
    prefill(cache, b)  # both missed: b holds duplicates of a's tokens
    cache.cache_finished_req(a)
    cache.cache_finished_req(b)
    assert cache.total_size() == 6
    assert cache.token_to_kv_pool_allocator.available_size() == 94
    assert_healthy(cache)


def test_cache_unfinished_req_chunked_prefill() -> None:
    cache = new_cache()
    other = SimpleReq(list(range(8)) + [99])
    prefill(cache, other)
    req = SimpleReq(list(range(30)))
    prefill(cache, req, upto=10)
    cache.cache_finished_req(other)  # caches 0..7, duplicates of req's first 8 slots
    cache.cache_unfinished_req(req)
    row = cache.req_to_token_pool.req_to_token[req.req_pool_idx]
    assert req.prefix_indices.numel() == 10
    assert row[:10].tolist() == req.prefix_indices.tolist()
    assert req.prefix_indices.tolist() == cache.match_prefix(list(range(10))).device_indices.tolist()
    assert cache.protected_size() == 10 and req.last_node.lock_ref == 1
    prefill(cache, req, upto=25)
    cache.cache_unfinished_req(req)
    assert cache.protected_size() == 25
    prefill(cache, req)
    cache.cache_finished_req(req)
    assert cache.total_size() == 31  # 30 + the 99 branch
    assert_healthy(cache)


def test_token_granular_reuse() -> None:
    """The issue's scenario: lengths 100, 1000, 1000, 500, 1100 reuse 0, 100, 999, 499, 1000."""
    cache = new_cache(size=8192)
    base = [(i * 7919) % 32000 for i in range(1100)]
    cached = []
    for n in (100, 1000, 1000, 500, 1100):
        req = SimpleReq(base[:n])
        cached.append(prefill(cache, req))
        cache.cache_finished_req(req)
        assert_healthy(cache)
    assert cached == [0, 100, 999, 499, 1000]
    for n in (999, 499, 1, 1100):
        assert cache.match_prefix(base[:n]).device_indices.numel() == n
    assert cache.total_size() == 1100


def test_disabled_cache_shares_nothing() -> None:
    cache = new_cache(size=64, disable=True)
    for _ in range(2):
        req = SimpleReq([1, 2, 3, 4])
        assert prefill(cache, req) == 0
        cache.cache_finished_req(req)
    assert cache.total_size() == 0
    assert_healthy(cache)


def test_reset_and_leak_detection() -> None:
    cache = new_cache(size=64)
    put(cache, [1, 2, 3])
    leaked = cache.token_to_kv_pool_allocator.alloc(5)
    assert leaked is not None
    assert any("memory leak" in e for e in cache.check_invariants())
    cache.reset()
    cache.token_to_kv_pool_allocator.clear()
    assert cache.total_size() == 0 and cache.check_invariants(check_slots=True) == []
