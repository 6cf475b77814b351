"""Which waiting requests to prefill next: the ordering policies and the PrefillAdder.

Policies (a registry; names feed `--schedule-policy`): `fcfs` keeps arrival order; `lpm`
(longest prefix match first) falls back to fcfs past `LPM_FALLBACK_QUEUE_LEN` waiting
requests because it matches every queued prompt each step; `dfs-weight` walks the radix
tree visiting heavier subtrees first so requests sharing a prefix run together;
`random` shuffles with the scheduler's seeded generator; `lof` (longest output first)
admits the requests with the largest `max_new_tokens` first, so that in an offline batch
the long generations start early and the run does not end on a tail of a few of them
decoding alone at a small batch.

The PrefillAdder admits requests in that order under three budgets: the token budget
(`--max-prefill-tokens`, counting only the uncached part), the chunk budget
(`--chunked-prefill-size`; the request that overflows it is split), and memory
(free + evictable slots, minus what running requests are expected to still need:
their remaining `max_new_tokens` times the new-token ratio).

In-batch prefix sharing: a waiting request whose uncached part starts with at least
`IN_BATCH_PREFIX_MIN_TOKENS` tokens that a request admitted into this same batch is about
to compute waits one step (it stays queued), then hits those tokens in the tree instead
of computing them a second time. The batch's admitted prompts are few, so a slice
comparison against each stands in for SGLang's temporary radix tree.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Callable, Optional

from radixlm.managers.kv_cache_manager import KVCacheManager
from radixlm.managers.schedule_batch import Req

LPM_FALLBACK_QUEUE_LEN = 128
IN_BATCH_PREFIX_MIN_TOKENS = 32  # shared uncached tokens that make a request wait one step
CLIP_MAX_NEW_TOKENS = 4096  # reservation cap per request, as SGLang does

PolicyFn = Callable[[list[Req], KVCacheManager, random.Random], list[Req]]
SCHEDULE_POLICIES: dict[str, PolicyFn] = {}


def register_policy(name: str) -> Callable[[PolicyFn], PolicyFn]:
    def wrap(fn: PolicyFn) -> PolicyFn:
        SCHEDULE_POLICIES[name] = fn
        return fn

    return wrap


def _prefix_len(req: Req, kv: KVCacheManager) -> tuple[int, Any]:
    req.fill_ids = req.all_token_ids()
    result = kv.tree_cache.match_prefix(req.fill_ids[:req.max_prefix_len()], extra_key=req.extra_key)
    return int(result.device_indices.numel()), result.last_node


@register_policy("fcfs")
def fcfs(queue: list[Req], kv: KVCacheManager, rng: random.Random) -> list[Req]:
    return list(queue)


@register_policy("lpm")
def longest_prefix_match(queue: list[Req], kv: KVCacheManager, rng: random.Random) -> list[Req]:
    if len(queue) > LPM_FALLBACK_QUEUE_LEN:
        return list(queue)
    lens = {id(r): _prefix_len(r, kv)[0] for r in queue}
    return sorted(queue, key=lambda r: -lens[id(r)])  # stable: ties keep arrival order


@register_policy("random")
def random_order(queue: list[Req], kv: KVCacheManager, rng: random.Random) -> list[Req]:
    out = list(queue)
    rng.shuffle(out)
    return out


@register_policy("lof")
def longest_output_first(queue: list[Req], kv: KVCacheManager, rng: random.Random) -> list[Req]:
    return sorted(queue, key=lambda r: -r.sampling_params.max_new_tokens)  # stable: ties keep arrival order


@register_policy("dfs-weight")
def dfs_weight(queue: list[Req], kv: KVCacheManager, rng: random.Random) -> list[Req]:
    """Group by the tree node each request's cached prefix ends at; DFS, heaviest child first."""
    if len(queue) > LPM_FALLBACK_QUEUE_LEN:
        return list(queue)
    by_node: dict[int, list[Req]] = defaultdict(list)
    nodes: dict[int, Any] = {}
    for req in queue:
        node = _prefix_len(req, kv)[1]
        by_node[id(node)].append(req)
        nodes[id(node)] = node
    weight: dict[int, int] = defaultdict(int)
    children: dict[int, list[Any]] = defaultdict(list)
    roots: list[Any] = []
    for key, node in nodes.items():
        weight[key] += len(by_node[key])
        cur = node
        while getattr(cur, "parent", None) is not None:
            parent = cur.parent
            if cur not in children[id(parent)] and id(cur) != id(parent):
                children[id(parent)].append(cur)
            weight[id(parent)] += len(by_node[key])
            cur = parent
        if not any(r is cur for r in roots):
            roots.append(cur)
    out: list[Req] = []

    def visit(node: Any) -> None:
        out.extend(by_node.get(id(node), []))
        for child in sorted(children[id(node)], key=lambda c: -weight[id(c)]):
            visit(child)

    for root in sorted(roots, key=lambda c: -weight[id(c)]):
        visit(root)
    return out


def order_queue(policy: str, queue: list[Req], kv: KVCacheManager, rng: random.Random) -> list[Req]:
    try:
        fn = SCHEDULE_POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown schedule policy {policy!r}; choose from {sorted(SCHEDULE_POLICIES)}") from None
    return fn(queue, kv, rng)


class PrefillAdder:
    """Admits requests into one prefill batch; `can_run` is the result, `new_chunked_req` the split one."""

    def __init__(self, kv: KVCacheManager, running: list[Req], new_token_ratio: float, max_prefill_tokens: int,
                 chunked_prefill_size: int, max_new_reqs: int) -> None:
        self.kv = kv
        self.new_token_ratio = new_token_ratio
        self.rem_input_tokens = max_prefill_tokens
        self.rem_chunk_tokens = chunked_prefill_size if chunked_prefill_size > 0 else None
        self.rem_reqs = max_new_reqs
        self.reserved = sum(self.decode_reservation(r) for r in running)
        self.can_run: list[Req] = []
        self.new_chunked_req: Optional[Req] = None
        self.computed_to: list[int] = []  # per can_run entry: prefix + extend (its fill_ids computed so far)
        self.deferred: list[Req] = []  # wait one step: their prefix is computed by this batch

    def decode_reservation(self, req: Req) -> int:
        return int(min(req.remaining_new_tokens(), CLIP_MAX_NEW_TOKENS) * self.new_token_ratio)

    def rem_total_tokens(self) -> int:
        return self.kv.available_tokens() - self.reserved

    def add_chunked_req(self, req: Req) -> bool:
        """Continue a request whose earlier chunks ran; its prefix (and row) is already held."""
        req.fill_ids = req.all_token_ids()
        return self._admit(req, prefix_len=req.kv_committed_len, locked=True)

    def add_one_req(self, req: Req) -> bool:
        """Try to admit a waiting request; False means stop adding (a budget is exhausted)."""
        if self.rem_reqs <= 0 or self.new_chunked_req is not None:
            return False
        req.fill_ids = req.all_token_ids()
        self.kv.match_and_lock(req)
        prefix_len = int(req.prefix_indices.numel())
        if self._prefix_computed_in_batch(req, prefix_len):
            self.kv.unlock(req)
            self.deferred.append(req)
            return True
        return self._admit(req, prefix_len=prefix_len, locked=False)

    def _prefix_computed_in_batch(self, req: Req, prefix_len: int) -> bool:
        """True when an admitted request computes >= IN_BATCH_PREFIX_MIN_TOKENS of req's next tokens."""
        end = prefix_len + IN_BATCH_PREFIX_MIN_TOKENS
        if not self.can_run or req.max_prefix_len() < end:
            return False
        ids = req.fill_ids
        for other, computed_to in zip(self.can_run, self.computed_to):
            theirs = other.fill_ids  # cheap token checks first, then one C-level slice compare
            if computed_to >= end and theirs[end - 1] == ids[end - 1] and theirs[prefix_len] == ids[prefix_len] \
                    and theirs[:end] == ids[:end]:
                return True
        return False

    def _admit(self, req: Req, prefix_len: int, locked: bool) -> bool:
        extend = len(req.fill_ids) - prefix_len
        if self.rem_chunk_tokens is not None and extend > self.rem_chunk_tokens:
            extend = self.rem_chunk_tokens
        first = not self.can_run
        chunked = extend < len(req.fill_ids) - prefix_len
        need = extend + (0 if chunked else self.decode_reservation(req))
        if extend <= 0 or need > self.rem_total_tokens() or (extend > self.rem_input_tokens and not first):
            if not locked:
                self.kv.unlock(req)
            return False
        req.extend_input_len = extend
        self.can_run.append(req)
        self.computed_to.append(prefix_len + extend)
        self.reserved += need
        self.rem_input_tokens -= extend
        self.rem_reqs -= 0 if locked else 1
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= extend
        if chunked:
            self.new_chunked_req = req
            return False
        return self.rem_input_tokens > 0 and (self.rem_chunk_tokens is None or self.rem_chunk_tokens > 0)
