"""ChunkCache (`--disable-radix-cache`): no sharing, chunked prefill keeps its own slots."""

from __future__ import annotations

import torch

from cache_reqs import SimpleReq, make_pools, prefill
from radixlm.mem_cache.chunk_cache import ChunkCache


def new_cache(size: int = 256) -> ChunkCache:
    pool, alloc = make_pools(size)
    return ChunkCache(pool, alloc)


def test_match_is_empty_and_nothing_is_cached() -> None:
    cache = new_cache()
    slots = cache.token_to_kv_pool_allocator.alloc(3)
    assert cache.insert([1, 2, 3], slots) == 0  # the caller keeps the slots
    m = cache.match_prefix([1, 2, 3])
    assert m.device_indices.numel() == 0 and m.device_indices.dtype == torch.int64
    assert cache.inc_lock_ref(m.last_node) == 0 and cache.dec_lock_ref(m.last_node) == 0
    assert (cache.evict(10), cache.evictable_size(), cache.protected_size(), cache.total_size()) == (0, 0, 0, 0)


def test_finished_req_frees_slots_and_row() -> None:
    cache = new_cache()
    for _ in range(3):  # the same prompt never hits
        req = SimpleReq(list(range(40)), output_ids=[5, 6])
        assert prefill(cache, req) == 0
        cache.cache_finished_req(req)
        assert req.req_pool_idx is None
        assert cache.check_invariants(check_slots=True) == []
    assert cache.token_to_kv_pool_allocator.available_size() == 256


def test_unfinished_req_keeps_computed_slots_as_prefix() -> None:
    cache = new_cache()
    req = SimpleReq(list(range(50)))
    prefill(cache, req, upto=20)
    cache.cache_unfinished_req(req)
    row = cache.req_to_token_pool.req_to_token[req.req_pool_idx]
    assert req.prefix_indices.tolist() == row[:20].tolist()
    assert cache.token_to_kv_pool_allocator.available_size() == 236
    prefill(cache, req, upto=45)
    cache.cache_unfinished_req(req)
    assert req.prefix_indices.tolist() == row[:45].tolist()
    assert cache.check_invariants(expect_idle=False) == []
    assert any("memory leak" in e for e in cache.check_invariants())
    prefill(cache, req)
    cache.cache_finished_req(req)
    assert cache.check_invariants(check_slots=True) == []
