"""Layer 3: a radix tree over token ids that shares KV slots between requests (page size 1).

Each node holds a run of token ids (`key`) and the KV slots that hold their K/V (`value`,
int64, same length). A path from the root spells a cached prefix; sharing is exact at
token boundaries, so a 9,999-token hit is 9,999 slots.

Invariants this module keeps (`check_invariants` verifies them):
- `lock_ref` counts the requests whose locked prefix passes through a node; locking walks
  the path to the root, so a parent's lock_ref is never below a child's.
- `evictable_size()` is the sum of key lengths of unlocked nodes, `protected_size()` of
  locked ones; together they are every slot the tree owns.
- Leaf-first eviction is structural: `_evictable_leaves` is exactly the set of unlocked,
  childless, non-root nodes, and `evict` only ever pops from a heap over that set (LRU by
  last access; stale heap entries are skipped). A parent enters the set only when its
  last child is gone, so nothing a request or a longer prefix depends on is evicted.
- Pins are a soft protection for the prefix a retracted request left behind
  (`cache_retracted_req`): `pin_ref` counts the pins whose path passes through a node (so a
  parent's is never below a child's), and the heap orders unpinned leaves before pinned
  ones. A pinned leaf is evicted only when no unpinned leaf is left, so pins never make
  memory unreachable (a lock would: a retraction could then deadlock the pool). A pin whose
  node is evicted moves to the parent, which already counted it.
- `extra_key` (cache_salt, later adapter ids) partitions the tree: the root's children
  are keyed by `(extra_key, first_token)` when it is set, so tenants never share a node.

`reset()` drops the tree without touching the allocator; the caller clears both (flush).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Hashable, Iterator, Optional, Sequence

import torch

from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.base_prefix_cache import BasePrefixCache, MatchResult
from radixlm.mem_cache.memory_pool import ReqToTokenPool
from radixlm.mem_cache.radix_invariants import check_radix_invariants
from radixlm.mem_cache.radix_node import (PrefixPin, TreeNode, as_token_list, child_key, common_prefix_len,
                                          heap_entry)


class RadixCache(BasePrefixCache):
    def __init__(self, req_to_token_pool: ReqToTokenPool, token_to_kv_pool_allocator: TokenToKVPoolAllocator,
                 disable: bool = False) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.device = token_to_kv_pool_allocator.device
        self.disable = disable
        self.reset()

    def reset(self) -> None:
        self._ids = itertools.count()
        self._clock = 0
        self._empty = torch.empty(0, dtype=torch.int64, device=self.device)
        self.root_node = TreeNode(next(self._ids), None, [], self._empty, None, 0)
        self._evictable_leaves: set[TreeNode] = set()
        self._heap: list[tuple[bool, int, int, TreeNode]] = []  # (pinned, last_access, id, node)
        self._evictable_size = 0
        self._protected_size = 0
        self._num_pins = 0

    # ---- lookup ------------------------------------------------------------------------------
    def match_prefix(self, token_ids: Sequence[int] | torch.Tensor,
                     extra_key: Optional[Hashable] = None) -> MatchResult:
        """Longest cached prefix of token_ids: its slots (int64) and the node where it ends.

        A match ending inside a node splits it, so the returned node covers exactly the
        match and locking it protects nothing more. Touches the path (LRU)."""
        tokens = as_token_list(token_ids)
        if self.disable or not tokens:
            return MatchResult(self._empty, self.root_node)
        node, _, values = self._walk(tokens, extra_key, self._tick())
        if len(values) == 1:
            return MatchResult(values[0].clone(), node)
        return MatchResult(torch.cat(values) if values else self._empty, node)

    def _walk(self, tokens: list[int], extra_key: Optional[Hashable],
              tick: int) -> tuple[TreeNode, int, list[torch.Tensor]]:
        """Follow tokens from the root, splitting where the match ends mid-node."""
        node, pos, n, values = self.root_node, 0, len(tokens), []
        child = node.children.get(child_key(node, tokens[0], extra_key))
        while child is not None:
            m = common_prefix_len(child.key, tokens, pos)
            ends_inside = m < len(child.key)
            if ends_inside:
                child = self._split(child, m, tick)
            child.last_access = tick
            values.append(child.value)
            node, pos = child, pos + m
            if ends_inside or pos == n:
                break
            child = node.children.get(tokens[pos])
        if node.evictable:
            self._push_heap(node)  # its last_access changed
        return node, pos, values

    def _split(self, child: TreeNode, m: int, tick: int) -> TreeNode:
        """Cut `child` after m tokens; the new upper node inherits its lock and takes its place."""
        parent = child.parent
        mid = TreeNode(next(self._ids), parent, child.key[:m], child.value[:m], child.extra_key, tick)
        mid.lock_ref = child.lock_ref
        mid.pin_ref = child.pin_ref  # pins end at or below child, so their paths pass through mid
        parent.children[child.key_in_parent()] = mid
        child.key, child.value, child.parent = child.key[m:], child.value[m:], mid
        mid.children[child.key[0]] = child
        return mid

    # ---- insertion ---------------------------------------------------------------------------
    def insert(self, token_ids: Sequence[int] | torch.Tensor, slots: torch.Tensor,
               extra_key: Optional[Hashable] = None) -> int:
        """Cache token_ids -> slots. Returns how many leading tokens were already cached: the
        caller still owns `slots[:returned]` (duplicates, usually freed); the tree now owns the
        rest. When disabled nothing is taken and 0 is returned."""
        tokens = as_token_list(token_ids)
        if len(tokens) != slots.numel():
            raise ValueError(f"insert got {len(tokens)} tokens but {slots.numel()} slots")
        if self.disable or not tokens:
            return 0
        return self._insert(tokens, slots, extra_key)[0]

    def _insert(self, tokens: list[int], slots: torch.Tensor,
                extra_key: Optional[Hashable]) -> tuple[int, TreeNode]:
        """insert() for a non-empty list; also returns the node where the tokens end."""
        tick = self._tick()
        node, pos, _ = self._walk(tokens, extra_key, tick)
        if pos < len(tokens):
            node = self._add_leaf(node, tokens[pos:], slots[pos:], extra_key, tick)
        return pos, node

    def _add_leaf(self, parent: TreeNode, key: list[int], slots: torch.Tensor,
                  extra_key: Optional[Hashable], tick: int) -> TreeNode:
        value = slots.to(dtype=torch.int64, device=self.device, copy=True)
        leaf = TreeNode(next(self._ids), parent, key, value, extra_key, tick)
        parent.children[child_key(parent, key[0], extra_key)] = leaf
        if parent.evictable:
            self._discard_evictable(parent)  # no longer a leaf
        self._evictable_size += len(key)
        self._add_evictable(leaf)
        return leaf

    # ---- request hooks -----------------------------------------------------------------------
    def cache_finished_req(self, req: Any) -> None:
        """Insert the request's committed tokens, free duplicate slots, unlock, release the row."""
        self._release_req(req)

    def cache_retracted_req(self, req: Any) -> Optional[PrefixPin]:
        """cache_finished_req, then pin the path of the committed tokens: eviction takes it only
        after every unpinned leaf, so the request hits its own prefix when it is readmitted."""
        node = self._release_req(req)
        return None if node is None else self.pin(node)

    def _release_req(self, req: Any) -> Optional[TreeNode]:
        """The release both hooks share; returns the node where the committed tokens end."""
        if req.req_pool_idx is None:
            return None
        tokens, slots = self._committed(req)
        node = None
        if self.disable:
            self.token_to_kv_pool_allocator.free(slots)
        else:
            prefix_len = req.prefix_indices.numel()
            cached, node = self._insert(tokens, slots, req.extra_key) if tokens else (0, None)
            if cached > prefix_len:
                self.token_to_kv_pool_allocator.free(slots[prefix_len:cached])
            self.dec_lock_ref(req.last_node)
        self.req_to_token_pool.free(req.req_pool_idx)
        req.req_pool_idx = None
        req.last_node = None
        return node

    def cache_unfinished_req(self, req: Any) -> None:
        """Insert what is computed so far and move the request's lock to the longer prefix.

        Duplicate slots (another request cached the same tokens first) are freed and the
        tree's slots written into the request's row, so `req_to_token[row, :committed]`
        equals `req.prefix_indices` afterwards."""
        tokens, slots = self._committed(req)
        if self.disable:
            req.prefix_indices = slots
            return
        prefix_len = req.prefix_indices.numel()
        cached = self.insert(tokens, slots, req.extra_key)
        if cached > prefix_len:
            self.token_to_kv_pool_allocator.free(slots[prefix_len:cached])
        match = self.match_prefix(tokens, req.extra_key)
        if cached > prefix_len:
            self.req_to_token_pool.write(req.req_pool_idx, prefix_len, match.device_indices[prefix_len:cached])
        self.inc_lock_ref(match.last_node)
        self.dec_lock_ref(req.last_node)
        req.prefix_indices = match.device_indices
        req.last_node = match.last_node

    def _committed(self, req: Any) -> tuple[list[int], torch.Tensor]:
        n = req.kv_committed_len
        tokens = req.all_token_ids()[:n]
        if len(tokens) != n:
            raise ValueError(f"kv_committed_len={n} exceeds the request's {len(tokens)} token ids")
        slots = self.req_to_token_pool.req_to_token[req.req_pool_idx, :n].to(torch.int64)
        return tokens, slots

    # ---- locks -------------------------------------------------------------------------------
    def inc_lock_ref(self, node: Optional[TreeNode]) -> int:
        """Lock the path root..node; returns the change of evictable_size (<= 0)."""
        delta = 0
        while node is not None and node.parent is not None:
            if node.lock_ref == 0:
                delta -= len(node.key)
                if node.evictable:
                    self._discard_evictable(node)
            node.lock_ref += 1
            node = node.parent
        self._evictable_size += delta
        self._protected_size -= delta
        return delta

    def dec_lock_ref(self, node: Optional[TreeNode]) -> int:
        """Unlock the path root..node; returns the change of evictable_size (>= 0)."""
        delta = 0
        while node is not None and node.parent is not None:
            if node.lock_ref <= 0:
                raise RuntimeError(f"dec_lock_ref on unlocked {node}")
            node.lock_ref -= 1
            if node.lock_ref == 0:
                delta += len(node.key)
                if not node.children:
                    self._add_evictable(node)
            node = node.parent
        self._evictable_size += delta
        self._protected_size -= delta
        return delta

    # ---- pins --------------------------------------------------------------------------------
    def pin(self, node: TreeNode) -> PrefixPin:
        """Protect the path root..node from eviction while unpinned leaves remain (see PrefixPin)."""
        pin = PrefixPin(node)
        if node.pins is None:
            node.pins = []
        node.pins.append(pin)
        self._num_pins += 1
        while node.parent is not None:
            node.pin_ref += 1
            if node.pin_ref == 1 and node.evictable:
                self._push_heap(node)  # its priority changed
            node = node.parent
        return pin

    def unpin(self, pin: Optional[PrefixPin]) -> None:
        """Drop a pin (the request was readmitted, finished or aborted). None is a no-op."""
        if pin is None:
            return
        node, pin.node = pin.node, None
        if node is None:
            raise RuntimeError("unpin of a pin that was already dropped")
        node.pins.remove(pin)
        if not node.pins:
            node.pins = None
        self._num_pins -= 1
        while node.parent is not None:
            node.pin_ref -= 1
            if node.pin_ref == 0 and node.evictable:
                self._push_heap(node)
            node = node.parent

    def num_pins(self) -> int:
        return self._num_pins

    # ---- eviction ----------------------------------------------------------------------------
    def evict(self, num_tokens: int) -> int:
        """Free at least num_tokens slots (if that many are evictable), least recently used
        leaves first, pinned leaves only once no unpinned one is left; a parent becomes a
        candidate once its last child is gone. Unpinned leaves go whole; a pinned leaf loses only
        the tail tokens still needed (page size 1), so a waiting request's retained prefix shrinks
        by what eviction needed instead of vanishing whole."""
        freed, values = 0, []
        while freed < num_tokens and self._heap:
            entry = heapq.heappop(self._heap)
            pinned, last_access, _, node = entry
            if not node.evictable or node.last_access != last_access or (node.pin_ref > 0) != pinned:
                continue  # stale entry
            cut = num_tokens - freed
            if pinned and cut < len(node.key):
                values.append(self._cut_leaf_tail(node, cut))
                heapq.heappush(self._heap, entry)  # still a leaf, same key: its entry stays live
                freed += cut
                break
            values.append(node.value)
            freed += len(node.key)
            self._delete_leaf(node)
        if values:
            self.token_to_kv_pool_allocator.free(torch.cat(values))
        return freed

    def _cut_leaf_tail(self, node: TreeNode, n: int) -> torch.Tensor:
        """Drop the last n (< len) tokens of an evictable leaf; returns their slots."""
        keep = len(node.key) - n
        tail = node.value[keep:]
        node.key, node.value = node.key[:keep], node.value[:keep]
        self._evictable_size -= n
        return tail

    def _delete_leaf(self, node: TreeNode) -> None:
        parent = node.parent
        self._discard_evictable(node)
        self._evictable_size -= len(node.key)
        del parent.children[node.key_in_parent()]
        if node.pins:  # the pins now end at the parent, whose pin_ref already counts them
            for pin in node.pins:
                pin.node = parent
            parent.pins = (parent.pins or []) + node.pins
            node.pins = None
        node.parent = None
        if parent.parent is not None and not parent.children and parent.lock_ref == 0:
            self._add_evictable(parent)

    def _add_evictable(self, node: TreeNode) -> None:
        node.evictable = True
        self._evictable_leaves.add(node)
        self._push_heap(node)

    def _discard_evictable(self, node: TreeNode) -> None:
        node.evictable = False
        self._evictable_leaves.discard(node)

    def _push_heap(self, node: TreeNode) -> None:
        heapq.heappush(self._heap, heap_entry(node))
        if len(self._heap) > 2 * len(self._evictable_leaves) + 1024:
            self._heap = [heap_entry(n) for n in self._evictable_leaves]
            heapq.heapify(self._heap)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    # ---- sizes and debugging -----------------------------------------------------------------
    def evictable_size(self) -> int:
        return self._evictable_size

    def protected_size(self) -> int:
        return self._protected_size

    def evictable_leaves(self) -> set[TreeNode]:
        """A copy of the set eviction draws from (unlocked, childless, non-root nodes)."""
        return set(self._evictable_leaves)

    def iter_nodes(self) -> Iterator[TreeNode]:
        """Every node, root first, parents before children."""
        stack = [self.root_node]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def check_invariants(self, expect_idle: bool = True, check_slots: bool = False) -> list[str]:
        return check_radix_invariants(self, expect_idle, check_slots)

    def pretty_print(self, max_tokens: int = 8) -> str:
        lines: list[str] = []
        stack = [(self.root_node, 0)]
        while stack:
            node, depth = stack.pop()
            head = node.key[:max_tokens]
            more = "..." if len(node.key) > max_tokens else ""
            salt = f" key={node.extra_key!r}" if depth == 1 and node.extra_key is not None else ""
            pin = f" pin={node.pin_ref}" if node.pin_ref else ""
            lines.append(f"{'  ' * depth}[{len(node.key)}] {head}{more} lock={node.lock_ref}{pin} "
                         f"t={node.last_access}{' E' if node.evictable else ''}{salt}")
            stack.extend((c, depth + 1) for c in node.children.values())
        lines.append(f"evictable={self._evictable_size} protected={self._protected_size}")
        text = "\n".join(lines)
        print(text)
        return text
