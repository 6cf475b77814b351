"""Scheduler-side request state (`Req`) and the batch the scheduler runs (`ScheduleBatch`).

A `Req` satisfies the `CacheableReq` protocol of `mem_cache.base_prefix_cache`:
`req_to_token[req_pool_idx, :kv_committed_len]` holds the KV slots of the first
`kv_committed_len` tokens of `all_token_ids()`; `prefix_indices`/`last_node` is the
locked cached prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from radixlm.model_executor.forward_batch import ForwardMode
from radixlm.sampling.sampling_params import SamplingParams

_EMPTY = torch.empty(0, dtype=torch.int64)


class Req:
    # Slots: the decode loops touch every running request each step; fixed attributes keep that
    # cheap (no per-object dict) and catch misspelled fields.
    __slots__ = ("rid", "origin_input_ids", "output_ids", "sampling_params", "seed", "stream", "return_logprob",
                 "logprob_start_len", "top_logprobs_num", "extra_key", "req_pool_idx", "kv_committed_len",
                 "prefix_indices", "last_node", "fill_ids", "extend_input_len", "is_chunked", "finished_reason",
                 "finish_check_len", "finish_check_tokens", "to_abort", "cached_tokens", "cached_tokens_set",
                 "num_retractions", "input_logprobs_done", "grammar_key", "grammar", "sent_output_len",
                 "pending_logprobs", "require_reasoning")

    def __init__(self, rid: str, input_ids: list[int], sampling_params: SamplingParams, seed: int,
                 stream: bool = False, return_logprob: bool = False, logprob_start_len: int = -1,
                 top_logprobs_num: int = 0, extra_key: Optional[str] = None, require_reasoning: bool = False) -> None:
        self.rid = rid
        self.origin_input_ids = list(input_ids)
        self.output_ids: list[int] = []
        self.sampling_params = sampling_params
        self.seed = seed
        self.stream = stream
        self.return_logprob = return_logprob
        self.logprob_start_len = logprob_start_len
        self.top_logprobs_num = top_logprobs_num
        self.extra_key = extra_key

        # KV state (CacheableReq)
        self.req_pool_idx: Optional[int] = None
        self.kv_committed_len = 0
        self.prefix_indices: torch.Tensor = _EMPTY
        self.last_node: Any = None

        # This round's extend: fill_ids[len(prefix_indices):len(prefix_indices)+extend_input_len]
        self.fill_ids: list[int] = []
        self.extend_input_len = 0
        self.is_chunked = 0  # > 0 while a chunk of its prefill is still to come

        self.finished_reason: Optional[dict] = None
        # The decode loop's shortcut (SchedulerOutput): the next full finish check is due at this
        # many output tokens, or sooner on one of these tokens; 0 = check every token
        self.finish_check_len = 0
        self.finish_check_tokens: frozenset[int] = frozenset()
        self.to_abort: Optional[str] = None  # abort message, applied at the next step
        self.cached_tokens = 0
        self.cached_tokens_set = False
        self.num_retractions = 0
        self.input_logprobs_done = False

        # Structured output: the grammar's key, and its matcher once compiled (GrammarManager).
        # The matcher has accepted exactly `output_ids`; it survives retraction untouched.
        self.grammar_key: Optional[tuple[str, str]] = None
        self.grammar: Optional[Any] = None  # radixlm.constrained.GrammarObject
        self.require_reasoning = require_reasoning  # the grammar waits for the thinking block to end

        # Output bookkeeping: what has been sent to the detokenizer
        self.sent_output_len = 0
        self.pending_logprobs: Optional[Any] = None  # io_struct.ReqLogprobs increments

    # ---- CacheableReq ------------------------------------------------------------------
    def all_token_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    # ---- lifecycle -----------------------------------------------------------------------
    def finished(self) -> bool:
        return self.finished_reason is not None

    @property
    def seqlen(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    def remaining_new_tokens(self) -> int:
        return max(0, self.sampling_params.max_new_tokens - len(self.output_ids))

    def wants_input_logprobs(self) -> bool:
        return self.return_logprob and self.logprob_start_len >= 0 and not self.input_logprobs_done

    def max_prefix_len(self) -> int:
        """Longest prefix that may come from the cache: the last token is always recomputed (its
        logits sample the next token), and input logprobs need their positions recomputed."""
        limit = len(self.fill_ids) - 1
        if self.wants_input_logprobs():
            limit = min(limit, max(self.logprob_start_len, 1) - 1)
        return max(0, limit)

    def reset_kv_state(self) -> None:
        """After a retraction released this request's KV: it will prefill again from the cache."""
        self.req_pool_idx = None
        self.kv_committed_len = 0
        self.prefix_indices = _EMPTY
        self.last_node = None
        self.extend_input_len = 0
        self.is_chunked = 0

    def __repr__(self) -> str:
        return f"Req(rid={self.rid}, input={len(self.origin_input_ids)}, output={len(self.output_ids)})"


@dataclass
class ScheduleBatch:
    """One forward's worth of requests (CPU side). `to_forward_batch` builds the tensors."""

    reqs: list[Req]
    forward_mode: ForwardMode
    # Extend only: per request, the prefix length and new-token count of this round
    prefix_lens: list[int] = field(default_factory=list)
    extend_lens: list[int] = field(default_factory=list)
    out_cache_loc: Optional[torch.Tensor] = None
    # Requests in `reqs` running as 1-token decodes inside a MIXED batch (issue 4)
    decoding_reqs: list[Req] = field(default_factory=list)
    forward_batch: Any = None  # the ForwardBatch built from this batch

    def batch_size(self) -> int:
        return len(self.reqs)

    def is_empty(self) -> bool:
        return not self.reqs

    def return_logprob(self) -> bool:
        return any(r.return_logprob for r in self.reqs)

    def extend_num_tokens(self) -> int:
        return sum(self.extend_lens)
