"""Micro-benchmark of RadixCache: match / insert of 1k and 10k-token sequences, eviction.

    python benchmark/bench_radix_cache.py [--repeat 200]

Prints one table (median time per call) with the settings it ran under.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time
from typing import Callable

import torch

from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.memory_pool import ReqToTokenPool
from radixlm.mem_cache.radix_cache import RadixCache
from radixlm.provenance import git_commit

VOCAB = 49152


def new_cache(size: int) -> RadixCache:
    return RadixCache(ReqToTokenPool(1, 8), TokenToKVPoolAllocator(size))


def tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(VOCAB) for _ in range(n)]


def put(cache: RadixCache, ids: list[int]) -> None:
    alloc = cache.token_to_kv_pool_allocator
    slots = alloc.alloc(len(ids))
    alloc.free(slots[:cache.insert(ids, slots)])


def median_us(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def bench_match(n: int, repeat: int) -> list[tuple[str, int, float]]:
    rows = []
    cache = new_cache(4 * n + 1024)
    seq = tokens(n, 1)
    put(cache, seq)
    rows.append((f"match {n} full hit (1 node)", n, median_us(lambda: cache.match_prefix(seq), repeat)))
    miss = seq[:n // 2] + tokens(n - n // 2, 2)
    cache.match_prefix(miss)  # split once; later calls see the split tree
    rows.append((f"match {n} half hit (after split)", n, median_us(lambda: cache.match_prefix(miss), repeat)))
    deep = new_cache(2 * n + 1024)
    for i in range(1, 101):  # a path of 100 nodes
        put(deep, seq[:i * n // 100] + [VOCAB + i])
    rows.append((f"match {n} through 100-node path", n, median_us(lambda: deep.match_prefix(seq), repeat)))
    return rows


def bench_insert(n: int, repeat: int) -> list[tuple[str, int, float]]:
    cache = new_cache((n + 64) * (repeat + 3) + 1024)
    seqs = iter([tokens(n, 100 + i) for i in range(repeat)])
    fresh = median_us(lambda: put(cache, next(seqs)), repeat)
    shared = tokens(n, 7)
    put(cache, shared)
    tails = iter([shared + tokens(64, 1000 + i) for i in range(repeat)])
    ext = median_us(lambda: put(cache, next(tails)), repeat)
    return [(f"insert {n} new", n, fresh), (f"insert {n}+64 sharing {n} prefix", n + 64, ext)]


def bench_evict(leaves: int, leaf_len: int, chunk: int, grouped: bool) -> tuple[str, int, float]:
    """Evict a tree of `leaves` leaves under one shared stem, `chunk` tokens per call. With
    `grouped` the allocator's frees are batched (free_group_begin/end), so the time is the
    tree's own; without, each call also pays the allocator's free-list concatenation."""
    cache = new_cache(leaves * leaf_len + 1024)
    stem = tokens(256, 3)
    for i in range(leaves):
        put(cache, stem + [i % VOCAB, i // VOCAB] + tokens(leaf_len - 2, i))
    total, calls = cache.evictable_size(), 0
    alloc = cache.token_to_kv_pool_allocator
    t0 = time.perf_counter()
    if grouped:
        alloc.free_group_begin()
    while cache.evictable_size():
        cache.evict(chunk)
        calls += 1
    if grouped:
        alloc.free_group_end()
    dt = time.perf_counter() - t0
    mode = "frees grouped" if grouped else "free per call"
    return (f"evict {leaves}x{leaf_len}-tok leaves, {chunk}/call, {mode} ({total / dt / 1e6:.2f} Mtok/s)",
            total, dt / calls * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the scheduler's view)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for n in (1000, 10000):
        rows += bench_match(n, args.repeat)
        rows += bench_insert(n, min(args.repeat, 100))
    rows.append(bench_evict(20000, 16, 256, grouped=True))
    rows.append(bench_evict(20000, 16, 256, grouped=False))
    print(f"# RadixCache micro-benchmark: python {platform.python_version()}, torch {torch.__version__}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (load {os.getloadavg()[0]:.1f}), "
          f"torch threads {args.threads}, commit {git_commit(__file__)}, repeat {args.repeat}, CPU tensors")
    print(f"| {'case':<72} | {'tokens':>6} | {'us/call':>9} | {'us/1k tok':>9} |")
    print(f"|{'-' * 74}|{'-' * 8}|{'-' * 11}|{'-' * 11}|")
    for name, n, us in rows:
        print(f"| {name:<72} | {n:>6} | {us:>9.1f} | {us * 1000 / n:>9.2f} |")


if __name__ == "__main__":
    main()
