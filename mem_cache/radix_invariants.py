"""Consistency checks of a RadixCache, for tests and the scheduler's idle check.

Kept beside the tree (not inside it) so `radix_cache.py` stays about the algorithm.
Every check returns messages instead of raising, so a caller can log them as a leak.
"""

from __future__ import annotations

from typing import Any

import torch


def check_radix_invariants(cache: Any, expect_idle: bool = True, check_slots: bool = False) -> list[str]:
    """Structure, size, pin and eviction-set checks; with expect_idle also the slot accounting
    `available + evictable == total`, nothing protected or pinned, every request row free; with
    check_slots every slot is owned exactly once (tree or free list)."""
    from radixlm.mem_cache.radix_node import heap_entry

    errors: list[str] = []
    evictable, protected, leaves = _walk_nodes(cache, errors)
    if evictable != cache.evictable_size():
        errors.append(f"evictable_size {cache.evictable_size()} != unlocked tokens in tree {evictable}")
    if protected != cache.protected_size():
        errors.append(f"protected_size {cache.protected_size()} != locked tokens in tree {protected}")
    if leaves != cache.evictable_leaves():
        errors.append(f"evictable-leaf set has {len(cache.evictable_leaves())} nodes, tree has {len(leaves)}")
    live = {entry[:3] for entry in cache._heap if entry == heap_entry(entry[3]) and entry[3].evictable}
    missing = [n for n in leaves if heap_entry(n)[:3] not in live]
    if missing:
        errors.append(f"{len(missing)} evictable leaves have no live heap entry, e.g. {missing[0]}")
    errors.extend(_pin_counts(cache))
    if expect_idle:
        errors.extend(_idle_accounting(cache, evictable, protected))
        if cache.num_pins():
            errors.append(f"idle but {cache.num_pins()} retained prefixes are still pinned")
    if check_slots:
        errors.extend(_slot_ownership(cache, expect_idle))
    return errors


def _walk_nodes(cache: Any, errors: list[str]) -> tuple[int, int, set]:
    root = cache.root_node
    evictable = protected = 0
    leaves = set()
    for node in cache.iter_nodes():
        for key, child in node.children.items():
            if child.parent is not node or child.key_in_parent() != key:
                errors.append(f"{child} is filed under key {key!r} of {node} but does not belong there")
        if node is root:
            if node.key or node.lock_ref or node.evictable:
                errors.append(f"root has key/lock/evictable set: {node}")
            continue
        n = len(node.key)
        if n == 0 or node.value.numel() != n:
            errors.append(f"{node} has {n} tokens and {node.value.numel()} slots")
        parent = node.parent
        if parent is not root and (node.lock_ref > parent.lock_ref or node.last_access > parent.last_access
                                   or node.pin_ref > parent.pin_ref):
            errors.append(f"{node} is locked, pinned or accessed more than its parent {parent}")
        if node.lock_ref < 0 or node.pin_ref < 0:
            errors.append(f"{node} has a negative lock_ref or pin_ref")
        if node.lock_ref:
            protected += n
        else:
            evictable += n
        should_be_leaf = node.lock_ref == 0 and not node.children
        if should_be_leaf != node.evictable:
            errors.append(f"{node}: evictable flag {node.evictable}, expected {should_be_leaf}")
        if should_be_leaf:
            leaves.add(node)
    return evictable, protected, leaves


def _pin_counts(cache: Any) -> list[str]:
    """Each node's pin_ref is the number of pins ending in its subtree; pins point back at their node."""
    errors = []
    below: dict[Any, int] = {}
    for node in reversed(list(cache.iter_nodes())):  # children before parents
        pins = node.pins or ()
        if any(pin.node is not node for pin in pins):
            errors.append(f"{node} holds a pin that points elsewhere")
        below[node] = len(pins) + sum(below[c] for c in node.children.values())
        if node.parent is not None and below[node] != node.pin_ref:
            errors.append(f"{node}: pin_ref {node.pin_ref} but {below[node]} pins end in its subtree")
    if below[cache.root_node] != cache.num_pins():
        errors.append(f"{cache.num_pins()} pins handed out but {below[cache.root_node]} are in the tree")
    return errors


def _idle_accounting(cache: Any, evictable: int, protected: int) -> list[str]:
    errors = []
    alloc = cache.token_to_kv_pool_allocator
    available = alloc.available_size()
    if protected:
        errors.append(f"idle but {protected} tokens are still locked (protected)")
    if available + evictable + protected != alloc.size:
        errors.append(f"memory leak: available={available} + evictable={evictable} + protected={protected} "
                      f"!= total={alloc.size}")
    rows = cache.req_to_token_pool
    if rows.available_size() != rows.size:
        errors.append(f"idle but only {rows.available_size()}/{rows.size} request rows are free")
    return errors


def _slot_ownership(cache: Any, expect_idle: bool) -> list[str]:
    alloc = cache.token_to_kv_pool_allocator
    values = [n.value for n in cache.iter_nodes() if n.value.numel()]
    tree = torch.cat(values).cpu() if values else torch.empty(0, dtype=torch.int64)
    owned = torch.cat((tree, alloc.free_slots.cpu()))
    errors = []
    if owned.unique().numel() != owned.numel():
        errors.append("a slot is held twice (tree and/or free list)")
    if owned.numel() and (owned.min() < 1 or owned.max() > alloc.size):
        errors.append("a slot outside 1..size is held (slot 0 is reserved)")
    if expect_idle and owned.numel() != alloc.size:
        errors.append(f"{alloc.size - owned.numel()} slots are neither free nor in the tree")
    return errors
