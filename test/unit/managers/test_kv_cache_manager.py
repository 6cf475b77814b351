"""KVCacheManager's retraction hooks over a real RadixCache, allocator and pools: the retained
prefix is pinned while the request waits, and the pin is dropped on readmission, finish or abort."""

from __future__ import annotations

from radixlm.managers.kv_cache_manager import KVCacheManager
from radixlm.managers.schedule_batch import Req
from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.memory_pool import ReqToTokenPool
from radixlm.mem_cache.radix_cache import RadixCache
from radixlm.sampling.sampling_params import SamplingParams


def _kv(total: int = 200, rows: int = 4) -> KVCacheManager:
    alloc = TokenToKVPoolAllocator(total)
    pool = ReqToTokenPool(rows, 512)
    return KVCacheManager(pool, alloc, RadixCache(pool, alloc))


def _running(kv: KVCacheManager, rid: str, ids: list[int], outputs: int) -> Req:
    """A request admitted (prefix matched, row, slots for every token) with `outputs` decoded."""
    req = Req(rid, ids, SamplingParams(max_new_tokens=32, temperature=0).normalize(), seed=0)
    req.fill_ids = req.all_token_ids()
    kv.match_and_lock(req)
    req.req_pool_idx = kv.alloc_row()
    kv.readmit(req)
    kv.write_prefix(req)
    start = req.prefix_indices.numel()
    req.output_ids = [7] * outputs
    kv.write_slots(req, start, kv.alloc_slots(len(ids) + outputs - start))
    req.kv_committed_len = len(ids) + outputs
    return req


def _readmit(kv: KVCacheManager, req: Req) -> int:
    """Admit a retracted request again and prefill what is not cached; returns the cached length."""
    req.fill_ids = req.all_token_ids()
    kv.match_and_lock(req)
    req.req_pool_idx = kv.alloc_row()
    kv.readmit(req)
    kv.write_prefix(req)
    cached = int(req.prefix_indices.numel())
    kv.write_slots(req, cached, kv.alloc_slots(len(req.fill_ids) - cached))
    req.kv_committed_len = len(req.fill_ids)
    return cached


def test_retract_keeps_pins_and_readmission_hits() -> None:
    kv = _kv()
    req = _running(kv, "a", list(range(100, 140)), outputs=5)
    assert kv.retract_req(req) == 45  # everything it computed is kept (evictable), none freed
    assert req.req_pool_idx is None and req.kv_committed_len == 0
    assert kv.tree_cache.num_pins() == 1
    other = _running(kv, "b", list(range(200, 330)), outputs=0)  # 130 of the 155 free slots
    kv.release_req(other)  # finished: unpinned, and newer than the retained prefix
    taken = kv.alloc_slots(150)  # 25 free + 125 evicted: from b's unpinned leaf only
    kv.allocator.free(taken)
    assert _readmit(kv, req) == 44  # its own prefix (the last token is recomputed)
    assert kv.tree_cache.num_pins() == 0  # readmitted: it holds a lock now
    kv.release_req(req)
    assert kv.check_idle(), kv.leak_message


def test_pin_dropped_when_a_waiting_request_is_aborted() -> None:
    kv = _kv()
    req = _running(kv, "a", list(range(100, 140)), outputs=2)
    kv.retract_req(req)
    assert not kv.check_idle()  # nothing waits in this test, so a held pin is a leak
    kv.memory_leak, kv.leak_message = False, None
    req.finished_reason = {"type": "abort", "message": "aborted by request"}
    kv.release_req(req)  # what Scheduler.abort_request does for a waiting request
    assert kv.tree_cache.num_pins() == 0
    assert kv.check_idle(), kv.leak_message


def test_retracted_twice_holds_one_pin() -> None:
    kv = _kv()
    req = _running(kv, "a", list(range(100, 110)), outputs=3)
    kv.retract_req(req)
    assert _readmit(kv, req) == 12
    kv.retract_req(req)
    assert kv.tree_cache.num_pins() == 1
    kv.release_req(req)
    assert kv.check_idle(), kv.leak_message
