"""Layer 3: the prefix cache that shares nothing (`--disable-radix-cache`).

Same interface as RadixCache so the scheduler has one code path. A request keeps its own
slots in its `req_to_token` row between prefill chunks and gives them all back when it
finishes; matches are always empty and nothing is ever evictable.
"""

from __future__ import annotations

from typing import Any, Hashable, Optional, Sequence

import torch

from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.base_prefix_cache import BasePrefixCache, MatchResult
from radixlm.mem_cache.memory_pool import ReqToTokenPool


class ChunkCache(BasePrefixCache):
    def __init__(self, req_to_token_pool: ReqToTokenPool,
                 token_to_kv_pool_allocator: TokenToKVPoolAllocator) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self._empty = torch.empty(0, dtype=torch.int64, device=token_to_kv_pool_allocator.device)

    def reset(self) -> None:
        pass

    def match_prefix(self, token_ids: Sequence[int] | torch.Tensor,
                     extra_key: Optional[Hashable] = None) -> MatchResult:
        return MatchResult(self._empty, None)

    def insert(self, token_ids: Sequence[int] | torch.Tensor, slots: torch.Tensor,
               extra_key: Optional[Hashable] = None) -> int:
        """Takes nothing: the caller keeps ownership of every slot."""
        return 0

    def cache_finished_req(self, req: Any) -> None:
        if req.req_pool_idx is None:
            return
        n = req.kv_committed_len
        self.token_to_kv_pool_allocator.free(self.req_to_token_pool.req_to_token[req.req_pool_idx, :n].to(torch.int64))
        self.req_to_token_pool.free(req.req_pool_idx)
        req.req_pool_idx = None
        req.last_node = None

    def cache_unfinished_req(self, req: Any) -> None:
        """The computed slots stay in the row and become the prefix the next chunk extends."""
        n = req.kv_committed_len
        req.prefix_indices = self.req_to_token_pool.req_to_token[req.req_pool_idx, :n].to(torch.int64)

    def inc_lock_ref(self, node: Any) -> int:
        return 0

    def dec_lock_ref(self, node: Any) -> int:
        return 0

    def evict(self, num_tokens: int) -> int:
        return 0

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def check_invariants(self, expect_idle: bool = True, check_slots: bool = False) -> list[str]:
        if not expect_idle:
            return []
        errors = []
        alloc, rows = self.token_to_kv_pool_allocator, self.req_to_token_pool
        if alloc.available_size() != alloc.size:
            errors.append(f"memory leak: available={alloc.available_size()} != total={alloc.size} (nothing is cached)")
        if rows.available_size() != rows.size:
            errors.append(f"idle but only {rows.available_size()}/{rows.size} request rows are free")
        if check_slots and alloc.free_slots.unique().numel() != alloc.free_slots.numel():
            errors.append("a slot is on the free list twice")
        return errors
