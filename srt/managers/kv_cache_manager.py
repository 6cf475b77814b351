"""The scheduler's view of KV memory: request rows, token slots, and the prefix cache.

Every path that hands KV back (finish, chunk boundary, retraction, abort) goes through
`release_req` / `cache_chunk` / `retract_req` here, and `deferred_frees()` can hold those
releases until the forward that still reads the slots is done (the overlap loop). The idle
invariant `available + evictable == total`, every request row free, no retained prefix still
pinned, is checked by `check_idle`.

Retraction keeps what the request computed in the prefix cache and pins it
(`cache_retracted_req`): eviction takes every unpinned leaf first, so the request usually hits
its own prefix when it is readmitted. The pin is dropped when the request is readmitted
(`readmit`, it then holds a lock on that prefix) or leaves the queue (`release_req`).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator, Optional

import torch

from radixlm.managers.schedule_batch import Req

logger = logging.getLogger(__name__)


class KVCacheManager:
    def __init__(self, req_to_token_pool: Any, allocator: Any, tree_cache: Any) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.tree_cache = tree_cache
        self._deferred: Optional[list[Callable[[], None]]] = None
        self._retained: dict[Req, Any] = {}  # waiting retracted request -> pin on its retained prefix
        self.memory_leak = False
        self.leak_message: Optional[str] = None

    # ---- capacity ------------------------------------------------------------------------
    @property
    def total_tokens(self) -> int:
        return self.allocator.size

    def available_tokens(self) -> int:
        """Slots free now plus slots the cache could free by evicting unlocked leaves."""
        return self.allocator.available_size() + self.tree_cache.evictable_size()

    def used_tokens(self) -> int:
        return self.total_tokens - self.available_tokens()

    def free_rows(self) -> int:
        return self.req_to_token_pool.available_size()

    # ---- prefix matching -------------------------------------------------------------------
    def match_and_lock(self, req: Req) -> None:
        """Set req.prefix_indices/last_node from the cache and lock the path."""
        limit = req.max_prefix_len()
        result = self.tree_cache.match_prefix(req.fill_ids[:limit], extra_key=req.extra_key)
        req.prefix_indices = result.device_indices
        req.last_node = result.last_node
        self.tree_cache.inc_lock_ref(req.last_node)

    def unlock(self, req: Req) -> None:
        self.tree_cache.dec_lock_ref(req.last_node)
        req.last_node = None

    # ---- allocation ------------------------------------------------------------------------
    def alloc_slots(self, n: int) -> Optional[torch.Tensor]:
        """n token slots, evicting unlocked cache leaves when short; None if impossible."""
        short = n - self.allocator.available_size()
        if short > 0:
            self.tree_cache.evict(short)
        return self.allocator.alloc(n)

    def alloc_row(self) -> Optional[int]:
        rows = self.req_to_token_pool.alloc(1)
        return None if rows is None else rows[0]

    def write_prefix(self, req: Req) -> None:
        if req.prefix_indices.numel():
            self.req_to_token_pool.write(req.req_pool_idx, 0, req.prefix_indices)

    def write_slots(self, req: Req, start: int, slots: torch.Tensor) -> None:
        self.req_to_token_pool.write(req.req_pool_idx, start, slots)

    def write_decode_slots(self, rows: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> None:
        """One slot per request (decode): `req_to_token[rows[i], positions[i]] = slots[i]`, in one op."""
        table = self.req_to_token_pool.req_to_token
        table[rows.to(table.device), positions.to(table.device)] = slots.to(device=table.device, dtype=table.dtype)

    # ---- release (the one place KV goes back) ----------------------------------------------
    @contextlib.contextmanager
    def deferred_frees(self) -> Iterator[list[Callable[[], None]]]:
        """Collect releases instead of running them; the caller runs them once it is safe."""
        outer, self._deferred = self._deferred, []
        try:
            yield self._deferred
        finally:
            self._deferred = outer

    def _run_or_defer(self, fn: Callable[[], None]) -> None:
        if self._deferred is not None:
            self._deferred.append(fn)
        else:
            fn()

    def release_req(self, req: Req) -> None:
        """Insert the request's computed tokens into the cache, free the rest and its row. A waiting
        request (no row) only gives back its lock and the pin a retraction left."""
        self.tree_cache.unpin(self._retained.pop(req, None))
        if req.req_pool_idx is None:
            if req.last_node is not None:
                self.unlock(req)
            return
        self._run_or_defer(lambda: self.tree_cache.cache_finished_req(req))

    def retract_req(self, req: Req) -> int:
        """Release a running request back to the queue, keeping what it computed cached and pinned
        until it is readmitted. Returns how many tokens became evictable (kept, not freed).
        Never deferred: retraction runs with no forward in flight."""
        if self._deferred is not None:
            raise RuntimeError("retraction while a forward still reads the request's slots")
        evictable_before = self.tree_cache.evictable_size()
        self.tree_cache.unpin(self._retained.pop(req, None))
        pin = self.tree_cache.cache_retracted_req(req)
        if pin is not None:
            self._retained[req] = pin
        req.reset_kv_state()
        return self.tree_cache.evictable_size() - evictable_before

    def readmit(self, req: Req) -> None:
        """The request got a row again and holds its cached prefix locked: its pin is not needed."""
        self.tree_cache.unpin(self._retained.pop(req, None))

    def cache_chunk(self, req: Req) -> None:
        """Between prefill chunks: insert what is computed so far and re-lock the longer prefix."""
        self.tree_cache.cache_unfinished_req(req)

    def release_unstarted(self, req: Req, slots: Optional[torch.Tensor]) -> None:
        """Undo an admission whose forward never ran (slots allocated, nothing written)."""
        if slots is not None:
            self.allocator.free(slots)
        if req.req_pool_idx is not None:
            self.req_to_token_pool.free(req.req_pool_idx)
        self.unlock(req)
        req.reset_kv_state()

    # ---- invariants ------------------------------------------------------------------------
    def check_idle(self) -> bool:
        """Call only when nothing runs or waits: every slot is free or evictable, every row free."""
        available = self.allocator.available_size()
        evictable = self.tree_cache.evictable_size()
        protected = self.tree_cache.protected_size()
        rows_free = self.req_to_token_pool.available_size()
        problems = list(self.tree_cache.check_invariants(expect_idle=True))
        if self._retained:
            problems.append(f"{len(self._retained)} retracted requests still hold a pin but none waits")
        if not (available + evictable == self.total_tokens and protected == 0
                and rows_free == self.req_to_token_pool.size):
            problems.insert(0, f"available={available} evictable={evictable} protected={protected} "
                               f"total={self.total_tokens}; free rows {rows_free}/{self.req_to_token_pool.size}")
        ok = not problems
        if not ok:
            self.memory_leak = True
            self.leak_message = "memory leak: " + "; ".join(problems)
            logger.error(self.leak_message)
        return ok
