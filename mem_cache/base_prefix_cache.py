"""Layer 3: the interface every prefix cache implements (RadixCache, ChunkCache).

A cache maps token-id sequences (partitioned by an `extra_key` such as `cache_salt`)
to KV slot indices. Schedulers talk to this interface only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

import torch


class CacheableReq(Protocol):
    """What a prefix cache reads and writes on a scheduler request (duck-typed).

    - `all_token_ids()`: input ids followed by output ids so far.
    - `kv_committed_len`: how many leading tokens of `all_token_ids()` have KV slots
      in `req_to_token[req_pool_idx, :kv_committed_len]` (allocated and written, or
      being written by the batch in flight).
    - `prefix_indices` / `last_node`: the locked cached prefix (set by the scheduler
      from `match_prefix`, updated by `cache_unfinished_req`).
    - `extra_key`: the partition key (cache_salt, ...), or None.
    """

    req_pool_idx: Optional[int]
    kv_committed_len: int
    prefix_indices: torch.Tensor
    last_node: Any
    extra_key: Optional[str]

    def all_token_ids(self) -> list[int]: ...


@dataclass
class MatchResult:
    """The longest cached prefix: its slot indices and the tree node where it ends."""

    device_indices: torch.Tensor  # int64 [matched_len]
    last_node: Any


class BasePrefixCache(ABC):
    @abstractmethod
    def reset(self) -> None: ...

    @abstractmethod
    def match_prefix(self, token_ids: Sequence[int], extra_key: Optional[str] = None) -> MatchResult: ...

    @abstractmethod
    def insert(self, token_ids: Sequence[int], slots: torch.Tensor, extra_key: Optional[str] = None) -> int:
        """Insert; return how many leading tokens were already cached (their `slots` are duplicates)."""

    @abstractmethod
    def cache_finished_req(self, req: Any) -> None:
        """Insert a finished (or retracted) request's committed tokens, free duplicate/uncached
        slots, release its lock and row; sets `req.req_pool_idx` and `req.last_node` to None.
        Reads the request's fields when called: if the call is deferred, defer resets too."""

    @abstractmethod
    def cache_unfinished_req(self, req: Any) -> None:
        """Insert a running (chunked) request's computed tokens; re-lock the new node."""

    def cache_retracted_req(self, req: Any) -> Any:
        """Release a retracted request like `cache_finished_req`, and return a pin that keeps what
        it computed cached in preference to other evictable entries until `unpin` (when it is
        readmitted or leaves). A cache that keeps nothing returns None."""
        self.cache_finished_req(req)
        return None

    def unpin(self, pin: Any) -> None:
        """Drop a pin from `cache_retracted_req` (None is a no-op)."""

    @abstractmethod
    def inc_lock_ref(self, node: Any) -> int: ...

    @abstractmethod
    def dec_lock_ref(self, node: Any) -> int: ...

    @abstractmethod
    def evict(self, num_tokens: int) -> int:
        """Evict at least num_tokens unlocked tokens, leaves first (LRU); return how many were freed."""

    @abstractmethod
    def evictable_size(self) -> int: ...

    @abstractmethod
    def protected_size(self) -> int: ...

    def total_size(self) -> int:
        """Tokens (slots) the cache owns: evictable + protected."""
        return self.evictable_size() + self.protected_size()

    def check_invariants(self, expect_idle: bool = True, check_slots: bool = False) -> list[str]:
        """Messages describing broken invariants (empty when healthy). With expect_idle (nothing
        runs or waits): `available + evictable == total`, nothing protected, every row free."""
        return []
