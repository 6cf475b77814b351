"""Property tests for TokenToKVPoolAllocator: round trips, all-or-nothing allocation, no double hand-out."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlm.mem_cache.allocator import TokenToKVPoolAllocator

# an op is ("alloc", n) or ("free", k): free the k-th live allocation (mod count)
OPS = st.lists(st.one_of(st.tuples(st.just("alloc"), st.integers(0, 40)),
                         st.tuples(st.just("free"), st.integers(0, 1000)),
                         st.tuples(st.just("group"), st.integers(0, 1000))), max_size=60)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 64), ops=OPS)
def test_random_alloc_free_sequences_keep_slots_unique(size: int, ops: list[tuple[str, int]]) -> None:
    alloc = TokenToKVPoolAllocator(size)
    live: list[torch.Tensor] = []
    for op, n in ops:
        if op == "alloc":
            before = alloc.available_size()
            got = alloc.alloc(n)
            if n > before:
                assert got is None and alloc.available_size() == before  # nothing partially taken
            else:
                assert got is not None and got.numel() == n and alloc.available_size() == before - n
                live.append(got)
        elif live:
            victim = live.pop(n % len(live))
            if op == "group":  # batched free: invisible until the group ends
                alloc.free_group_begin()
                alloc.free(victim)
                alloc.free_group_end()
            else:
                alloc.free(victim)
        held = torch.cat(live) if live else torch.empty(0, dtype=torch.int64)
        assert held.unique().numel() == held.numel(), "a slot was handed out twice"
        assert not (held == 0).any(), "slot 0 is reserved"
        assert held.numel() + alloc.available_size() == size
        assert ((held >= 1) & (held <= size)).all()


@settings(max_examples=100, deadline=None)
@given(size=st.integers(1, 100), chunks=st.lists(st.integers(1, 20), max_size=20))
def test_freeing_everything_restores_the_full_pool(size: int, chunks: list[int]) -> None:
    alloc = TokenToKVPoolAllocator(size)
    taken = [t for t in (alloc.alloc(n) for n in chunks) if t is not None]
    for t in reversed(taken):
        alloc.free(t)
    assert alloc.available_size() == size
    everything = alloc.alloc(size)
    assert sorted(everything.tolist()) == list(range(1, size + 1))
    assert alloc.alloc(1) is None


def test_group_free_is_deferred_until_group_end() -> None:
    alloc = TokenToKVPoolAllocator(8)
    a = alloc.alloc(8)
    alloc.free_group_begin()
    alloc.free(a[:3])
    alloc.free(a[3:5])
    assert alloc.available_size() == 0
    alloc.free_group_end()
    assert alloc.available_size() == 5
