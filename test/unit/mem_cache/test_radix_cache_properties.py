"""Property tests: random insert / match / lock / unlock / pin / unpin / evict sequences on a RadixCache.

A shadow dict maps every cached prefix (extra_key, tokens[:i+1]) to the slot of its last
token; the tree must agree with it after every step. Eviction is checked against a
reference that replays leaf-first LRU, unpinned leaves before pinned ones, on a snapshot of
the tree taken just before (a pinned leaf loses only the tail tokens still needed).
Pins (a retracted request's retained prefix) are counted independently of the tree.
"""

from __future__ import annotations

import heapq
from typing import Optional

import hypothesis.strategies as st
import torch
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.memory_pool import ReqToTokenPool
from radixlm.mem_cache.radix_cache import RadixCache
from radixlm.mem_cache.radix_node import PrefixPin, TreeNode

SIZE = 48
token_seqs = st.lists(st.integers(0, 3), min_size=0, max_size=10)
extra_keys = st.sampled_from([None, None, "salt"])


def expected_evictions(cache: RadixCache, num_tokens: int) -> list[tuple[TreeNode, int]]:
    """Replay leaf-first eviction on the current tree without touching it: (node, tokens taken)
    in order. Unpinned leaves before pinned ones, then LRU, ties by node id; unpinned leaves
    go whole, the last pinned one may lose only its tail."""
    children = {n: len(n.children) for n in cache.iter_nodes()}
    order = lambda n: (n.pin_ref > 0, n.last_access, n.id, n)  # noqa: E731
    heap = [order(n) for n in children if n.parent is not None and n.lock_ref == 0 and not n.children]
    heapq.heapify(heap)
    out, freed = [], 0
    while heap and freed < num_tokens:
        node = heapq.heappop(heap)[-1]
        take = min(len(node.key), num_tokens - freed) if node.pin_ref else len(node.key)
        out.append((node, take))
        freed += take
        parent = node.parent
        children[parent] -= 1
        if take == len(node.key) and parent.parent is not None and children[parent] == 0 and parent.lock_ref == 0:
            heapq.heappush(heap, order(parent))
    return out


class RadixMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.alloc = TokenToKVPoolAllocator(SIZE)
        self.cache = RadixCache(ReqToTokenPool(2, 16), self.alloc)
        self.shadow: dict[tuple, int] = {}
        self.locks: list[TreeNode] = []
        self.pins: list[tuple[PrefixPin, list[int]]] = []  # with the path the pin was taken on

    def shadow_prefix(self, tokens: list[int], extra_key: Optional[str]) -> list[int]:
        slots = []
        for i in range(len(tokens)):
            slot = self.shadow.get((extra_key, *tokens[:i + 1]))
            if slot is None:
                break
            slots.append(slot)
        return slots

    @rule(tokens=token_seqs, extra_key=extra_keys)
    def insert(self, tokens: list[int], extra_key: Optional[str]) -> None:
        short = len(tokens) - self.alloc.available_size()
        if short > 0:
            self.evict(short)
        slots = self.alloc.alloc(len(tokens))
        if slots is None:
            return
        expected = len(self.shadow_prefix(tokens, extra_key))
        cached = self.cache.insert(tokens, slots, extra_key)
        assert cached == expected
        self.alloc.free(slots[:cached])
        for i in range(cached, len(tokens)):
            self.shadow[(extra_key, *tokens[:i + 1])] = int(slots[i])

    @rule(tokens=token_seqs, extra_key=extra_keys)
    def match(self, tokens: list[int], extra_key: Optional[str]) -> None:
        result = self.cache.match_prefix(tokens, extra_key)
        assert result.device_indices.tolist() == self.shadow_prefix(tokens, extra_key)
        depth, node = 0, result.last_node
        while node.parent is not None:
            depth, node = depth + len(node.key), node.parent
        assert depth == result.device_indices.numel()

    @rule(tokens=token_seqs, extra_key=extra_keys)
    def lock(self, tokens: list[int], extra_key: Optional[str]) -> None:
        node = self.cache.match_prefix(tokens, extra_key).last_node
        self.cache.inc_lock_ref(node)
        self.locks.append(node)

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.locks) - 1))
        self.cache.dec_lock_ref(self.locks.pop(i))

    @rule(tokens=token_seqs, extra_key=extra_keys)
    def retract(self, tokens: list[int], extra_key: Optional[str]) -> None:
        """A retraction: what the request computed is inserted and pinned where it ends."""
        self.insert(tokens, extra_key)
        node = self.cache.match_prefix(tokens, extra_key).last_node
        self.pins.append((self.cache.pin(node), self.path(node)))

    @precondition(lambda self: self.pins)
    @rule(data=st.data())
    def unpin(self, data: st.DataObject) -> None:
        """The request was readmitted, finished or aborted."""
        pin, _ = self.pins.pop(data.draw(st.integers(0, len(self.pins) - 1)))
        self.cache.unpin(pin)
        assert pin.node is None

    @rule(num_tokens=st.integers(1, SIZE))
    def evict(self, num_tokens: int) -> None:
        expected = expected_evictions(self.cache, num_tokens)
        whole = [n for n, take in expected if take == len(n.key)]
        for node, take in expected:
            assert not node.children or all(c in whole for c in node.children.values())
            assert node.lock_ref == 0
        pinned_taken = any(n.pin_ref for n, _ in expected)
        cut = [(n, len(n.key) - take) for n, take in expected if take < len(n.key)]
        available, evictable = self.alloc.available_size(), self.cache.evictable_size()
        freed = self.cache.evict(num_tokens)
        assert freed == sum(take for _, take in expected)
        assert freed >= num_tokens or freed == evictable
        assert all(n.parent is None for n in whole)  # detached: exactly these went
        assert all(n.parent is not None and len(n.key) == left for n, left in cut)  # and this tail
        if pinned_taken:  # a protected leaf goes only when no unprotected one is left
            assert all(leaf.pin_ref for leaf in self.cache.evictable_leaves())
        assert self.alloc.available_size() == available + freed
        remaining = self.tree_shadow()
        assert all(self.shadow[k] == v for k, v in remaining.items())
        assert len(self.shadow) - len(remaining) == freed
        self.shadow = remaining

    def tree_shadow(self) -> dict[tuple, int]:
        """The shadow mapping read back from the tree."""
        out = {}
        for node in self.cache.iter_nodes():
            if node.parent is None:
                continue
            path = self.path(node)
            start = len(path) - len(node.key)
            for i, slot in enumerate(node.value.tolist()):
                out[(node.extra_key, *path[:start + i + 1])] = slot
        return out

    @staticmethod
    def path(node: TreeNode) -> list[int]:
        tokens: list[int] = []
        while node.parent is not None:
            tokens, node = node.key + tokens, node.parent
        return tokens

    @invariant()
    def consistent(self) -> None:
        idle = not self.locks and not self.pins
        assert self.cache.check_invariants(expect_idle=idle, check_slots=True) == []
        assert self.alloc.available_size() + self.cache.total_size() == SIZE
        assert self.cache.total_size() == len(self.shadow)
        assert self.tree_shadow() == self.shadow
        for node in self.locks:
            assert node.parent is not None or node is self.cache.root_node  # still attached
        self.refs_count_paths("lock_ref", self.locks)
        self.pins_consistent()

    def pins_consistent(self) -> None:
        """Each pin ends on an attached node on its original path (higher up after evictions)."""
        assert self.cache.num_pins() == len(self.pins)
        for pin, path in self.pins:
            node = pin.node
            assert node is self.cache.root_node or node.parent.children.get(node.key_in_parent()) is node
            assert path[:len(self.path(node))] == self.path(node)
        self.refs_count_paths("pin_ref", [pin.node for pin, _ in self.pins])

    def refs_count_paths(self, attr: str, ends: list[TreeNode]) -> None:
        """Each node's `attr` (lock_ref, pin_ref) is the number of paths root..end passing through it."""
        through: dict[TreeNode, int] = {}
        for node in ends:
            while node.parent is not None:
                through[node] = through.get(node, 0) + 1
                node = node.parent
        for node in self.cache.iter_nodes():
            if node.parent is not None:
                assert getattr(node, attr) == through.get(node, 0), (attr, node)


TestRadixProperties = RadixMachine.TestCase
TestRadixProperties.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])


def test_shadow_slot_lookup_is_exact() -> None:
    """Sanity check of the shadow: a tree built by two inserts maps every position."""
    machine = RadixMachine()
    machine.insert([1, 2, 3], None)
    machine.insert([1, 2, 0], "salt")
    assert len(machine.shadow) == 6 and machine.cache.total_size() == 6
    assert torch.equal(machine.cache.match_prefix([1, 2, 3]).device_indices,
                       torch.tensor([machine.shadow[(None, 1)], machine.shadow[(None, 1, 2)],
                                     machine.shadow[(None, 1, 2, 3)]]))
