"""The divergence guard: tensor-parallel ranks confirm they are about to run the same batch.

Every rank forms its batches on its own from the same broadcast inputs; if they ever
disagree (a nondeterministic policy, a rank-local clock, a bug), the collectives would
mix shards of different batches and produce wrong text, or hang on mismatched shapes.
So every `interval` steps (every step with `--enable-tp-consistency-check`) all ranks
all-gather a 64-bit fingerprint of the batch (mode, request ids, lengths, last tokens)
and stop with an error that names the disagreeing ranks. One 8-byte all-gather per check.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from radixlm.distributed import all_gather_int, get_tp_size, stable_hash

logger = logging.getLogger(__name__)


class TPDivergenceError(RuntimeError):
    """Ranks disagree on the batch; the server must stop rather than serve corrupted outputs."""


def batch_fingerprint(batch: Any) -> int:
    """Hash of what every rank must agree on: mode, and per request its id, lengths and last token."""
    parts = [str(int(batch.forward_mode))]
    for i, req in enumerate(batch.reqs):
        extend = batch.extend_lens[i] if i < len(batch.extend_lens) else 0
        last = req.output_ids[-1] if req.output_ids else -1
        parts.append(f"{req.rid}:{len(req.origin_input_ids)}:{len(req.output_ids)}:{extend}:{last}")
    return stable_hash("|".join(parts).encode())


def describe_divergence(hashes: list[int]) -> str:
    """Names the ranks whose fingerprint differs from the majority's (rank 0's on a tie)."""
    counts = Counter(hashes)
    top = max(counts.values())
    majority = hashes[0] if counts[hashes[0]] == top else counts.most_common(1)[0][0]
    agree = [r for r, h in enumerate(hashes) if h == majority]
    differ = [r for r, h in enumerate(hashes) if h != majority]
    return (f"tensor-parallel ranks diverged: ranks {differ} formed a different batch than ranks {agree} "
            f"(fingerprints {[f'{h & 0xffffffffffffffff:016x}' for h in hashes]}); stopping the server")


class TPConsistencyGuard:
    def __init__(self, server_args: Any) -> None:
        self.enabled = get_tp_size() > 1
        self.interval = 1 if server_args.enable_tp_consistency_check else max(
            1, server_args.tp_consistency_check_interval)
        self.steps = 0
        self.checks = 0

    def check(self, batch: Any) -> None:
        """Call on every rank, in the same order, before launching `batch`; raises on divergence."""
        if not self.enabled:
            return
        self.steps += 1
        if self.steps % self.interval != 0 and self.steps != 1:
            return
        self.checks += 1
        hashes = all_gather_int(batch_fingerprint(batch))
        if len(set(hashes)) > 1:
            message = describe_divergence(hashes)
            logger.error(message)
            raise TPDivergenceError(message)
