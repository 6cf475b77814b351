"""ForwardBatch: everything one model forward needs, as tensors (the device-side view).

Built by the scheduler from a ScheduleBatch; consumed by ModelRunner.forward. The model
code never sees requests, only this. Shapes use `num_tokens` (sum of new tokens over
the batch) and `bs` (number of requests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Optional

import torch

if TYPE_CHECKING:
    from radixlm.sampling.sampling_batch_info import SamplingBatchInfo


class ForwardMode(IntEnum):
    EXTEND = 1  # prefill, possibly over a cached prefix (chunked prefill too)
    DECODE = 2  # one new token per request
    MIXED = 3  # a chunked prefill plus running decodes in one forward (decodes as 1-token extends)
    IDLE = 4  # nothing to run on this rank (kept for collective alignment)

    def is_extend(self) -> bool:
        return self in (ForwardMode.EXTEND, ForwardMode.MIXED)

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE


@dataclass
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor  # int64 [num_tokens]
    positions: torch.Tensor  # int64 [num_tokens]
    req_pool_indices: torch.Tensor  # int64 [bs]: rows of req_to_token
    seq_lens: torch.Tensor  # int64 [bs]: KV length after this forward (prefix + new)
    out_cache_loc: torch.Tensor  # int64 [num_tokens]: KV slots the new tokens are written to
    seq_lens_cpu: list[int]
    sampling_info: Optional["SamplingBatchInfo"] = None

    # Extend only (for MIXED, decode rows have extend_seq_len 1)
    extend_prefix_lens: Optional[torch.Tensor] = None  # int64 [bs]
    extend_seq_lens: Optional[torch.Tensor] = None  # int64 [bs]
    extend_start_loc: Optional[torch.Tensor] = None  # int64 [bs]: offset of each request in input_ids
    extend_prefix_lens_cpu: Optional[list[int]] = None
    extend_seq_lens_cpu: Optional[list[int]] = None

    # Logprobs
    return_logprob: bool = False
    top_logprobs_nums: Optional[list[int]] = None  # per request; 0 = none
    # per request: first position (relative to the extend's new tokens) whose input logprob is wanted;
    # == extend_seq_len means no input logprobs for that request
    extend_logprob_start_lens_cpu: Optional[list[int]] = None

    # Attached by ModelRunner before the forward
    req_to_token_pool: Any = None
    token_to_kv_pool: Any = None
    attn_backend: Any = None
    extras: dict = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    def last_token_index(self) -> torch.Tensor:
        """int64 [bs] (extend batches): the row of each request's last new token in `input_ids`, the one
        whose output gives the request's next-token logits."""
        return torch.cumsum(self.extend_seq_lens, dim=0) - 1
