"""Helpers for the mem_cache tests: a minimal real request (the `CacheableReq` fields)
and a scheduler-like prefill driver.

No mocks: requests live in a real ReqToTokenPool and take slots from a real allocator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.base_prefix_cache import BasePrefixCache
from radixlm.mem_cache.memory_pool import ReqToTokenPool


@dataclass
class SimpleReq:
    input_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    extra_key: Optional[str] = None
    req_pool_idx: Optional[int] = None
    kv_committed_len: int = 0
    prefix_indices: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))
    last_node: Any = None

    def all_token_ids(self) -> list[int]:
        return self.input_ids + self.output_ids


def prefill(cache: BasePrefixCache, req: SimpleReq, upto: Optional[int] = None) -> int:
    """Do what the scheduler does for one extend of `req` up to `upto` tokens (default: all).

    First extend: match all but the last token (its logits are needed), lock, take a row.
    Then allocate slots for the uncached tokens and write them into the row. Returns the
    number of cached tokens the first extend reused."""
    pool, alloc = cache.req_to_token_pool, cache.token_to_kv_pool_allocator
    tokens = req.all_token_ids()
    upto = len(tokens) if upto is None else upto
    cached = 0
    if req.req_pool_idx is None:
        match = cache.match_prefix(tokens[:upto - 1], extra_key=req.extra_key)
        cache.inc_lock_ref(match.last_node)
        req.prefix_indices, req.last_node = match.device_indices, match.last_node
        req.req_pool_idx = pool.alloc(1)[0]
        pool.write(req.req_pool_idx, 0, req.prefix_indices)
        req.kv_committed_len = cached = req.prefix_indices.numel()
    need = upto - req.kv_committed_len
    if need > alloc.available_size():
        cache.evict(need - alloc.available_size())
    slots = alloc.alloc(need)
    assert slots is not None, "out of KV slots in a test"
    pool.write(req.req_pool_idx, req.kv_committed_len, slots)
    req.kv_committed_len = upto
    return cached


def make_pools(size: int = 4096, rows: int = 8, context: int = 2048) -> tuple[ReqToTokenPool, TokenToKVPoolAllocator]:
    return ReqToTokenPool(rows, context), TokenToKVPoolAllocator(size)
