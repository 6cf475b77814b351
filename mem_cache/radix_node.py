"""The radix tree's nodes and the small pure helpers the cache and its invariant checker share."""

from __future__ import annotations

from typing import Hashable, Optional, Sequence

import torch


class TreeNode:
    __slots__ = ("id", "parent", "children", "key", "value", "extra_key", "lock_ref", "last_access",
                 "evictable", "pin_ref", "pins")

    def __init__(self, node_id: int, parent: Optional["TreeNode"], key: list[int], value: torch.Tensor,
                 extra_key: Optional[Hashable], last_access: int) -> None:
        self.id = node_id
        self.parent = parent
        self.children: dict[Hashable, TreeNode] = {}
        self.key = key
        self.value = value
        self.extra_key = extra_key
        self.lock_ref = 0
        self.last_access = last_access
        self.evictable = False  # member of the tree's evictable-leaf set
        self.pin_ref = 0  # pins whose path passes through this node (evicted after unpinned leaves)
        self.pins: Optional[list[PrefixPin]] = None  # the pins that end exactly here

    def key_in_parent(self) -> Hashable:
        return child_key(self.parent, self.key[0], self.extra_key)

    def __repr__(self) -> str:
        return (f"TreeNode(id={self.id}, len={len(self.key)}, lock_ref={self.lock_ref}, pin_ref={self.pin_ref}, "
                f"children={len(self.children)})")


class PrefixPin:
    """A retracted request's hold on its retained prefix: the path root..node is evicted only after
    every unpinned leaf. `node` moves up when eviction takes the pinned node; None once unpinned."""

    __slots__ = ("node",)

    def __init__(self, node: TreeNode) -> None:
        self.node: Optional[TreeNode] = node


def child_key(parent: Optional[TreeNode], token: int, extra_key: Optional[Hashable]) -> Hashable:
    """Children are keyed by first token; under the root, by (extra_key, token) when salted."""
    if extra_key is not None and parent is not None and parent.parent is None:
        return (extra_key, token)
    return token


def common_prefix_len(key: list[int], tokens: list[int], start: int) -> int:
    """Length of the common prefix of `key` and `tokens[start:]` (list compares run in C)."""
    n = min(len(key), len(tokens) - start)
    if n == len(key):
        if key == tokens[start:start + n]:
            return n
    elif key[:n] == tokens[start:start + n]:
        return n
    i = 0
    for step in (256, 16):
        while i + step <= n and key[i:i + step] == tokens[start + i:start + i + step]:
            i += step
    while i < n and key[i] == tokens[start + i]:
        i += 1
    return i


def heap_entry(node: TreeNode) -> tuple[bool, int, int, TreeNode]:
    """Eviction order: unpinned before pinned, then least recently used, then oldest node."""
    return (node.pin_ref > 0, node.last_access, node.id, node)


def as_token_list(token_ids: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(token_ids, list):
        return token_ids
    if isinstance(token_ids, torch.Tensor):
        return token_ids.tolist()
    return [int(t) for t in token_ids]
