"""Per-batch sampling parameters as device tensors, built once per batch by the scheduler.

Sampling is a pure function of (logits, seed, step): every request carries a seed (the
user's `seed`, or one the scheduler draws from `--random-seed` when the request
arrives), and `steps[i]` is how many tokens request i has generated before this one.
So outputs are reproducible, identical with and without the overlap loop, and identical
on every tensor-parallel rank without broadcasting tokens.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class SamplingBatchInfo:
    temperatures: torch.Tensor  # float32 [bs, 1]; 0 means greedy for that row
    top_ps: torch.Tensor  # float32 [bs]
    top_ks: torch.Tensor  # int64 [bs]; vocab size (or -1 mapped to it) means off
    min_ps: torch.Tensor  # float32 [bs]
    seeds: torch.Tensor  # int64 [bs]
    steps: torch.Tensor  # int64 [bs]
    is_all_greedy: bool
    need_top_p_sampling: bool = False
    need_top_k_sampling: bool = False
    need_min_p_sampling: bool = False

    # Penalties (None when no request in the batch uses them)
    frequency_penalties: Optional[torch.Tensor] = None  # float32 [bs, 1]
    presence_penalties: Optional[torch.Tensor] = None  # float32 [bs, 1]
    repetition_penalties: Optional[torch.Tensor] = None  # float32 [bs, 1]
    output_token_counts: Optional[torch.Tensor] = None  # int32/float [bs, vocab]

    # logit_bias: float32 [bs, vocab] added to the logits (zero rows for requests without one), or None
    logit_bias: Optional[torch.Tensor] = None

    # Structured output: bool mask [bs, vocab] of allowed tokens (True = allowed), or None
    vocab_mask: Optional[torch.Tensor] = None
    # Structured output, the fast form: xgrammar's bit-packed int32 [bs, ceil(vocab / 32)]
    # (all-ones rows for unconstrained requests), applied in place by the sampler; or None
    vocab_bitmask: Optional[torch.Tensor] = None

    def changes_per_step(self) -> bool:
        """True when more than `steps` depends on the tokens so far (grammar masks, penalty counts)."""
        return self.vocab_bitmask is not None or self.vocab_mask is not None or self.output_token_counts is not None

    def rows(self, start: int, end: int) -> "SamplingBatchInfo":
        """The per-row draw parameters of rows [start, end) (temperature, filters, seed, step), for sampling
        a large batch in slices; penalties, biases and masks are left out: the sampler applies them first."""
        return SamplingBatchInfo(
            temperatures=self.temperatures[start:end], top_ps=self.top_ps[start:end], top_ks=self.top_ks[start:end],
            min_ps=self.min_ps[start:end], seeds=self.seeds[start:end], steps=self.steps[start:end],
            is_all_greedy=self.is_all_greedy, need_top_p_sampling=self.need_top_p_sampling,
            need_top_k_sampling=self.need_top_k_sampling, need_min_p_sampling=self.need_min_p_sampling)

    def next_step(self) -> "SamplingBatchInfo":
        """The same rows one token later; a new object, so a batch in flight keeps its own `steps`."""
        info = copy.copy(self)
        info.steps = self.steps + 1
        return info
