"""What one ModelRunner.forward returns (device tensors; the scheduler copies them to the host)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class ForwardOutput:
    next_token_ids: torch.Tensor  # int64 [bs]: the sampled token of every request in the batch
    # Only when forward_batch.return_logprob:
    next_token_logprobs: Optional[torch.Tensor] = None  # float32 [bs]: logprob of the sampled token
    # top-k of the next-token distribution, k = max(top_logprobs_nums); rows beyond a request's own k are ignored
    next_top_logprobs_val: Optional[torch.Tensor] = None  # float32 [bs, k]
    next_top_logprobs_idx: Optional[torch.Tensor] = None  # int64 [bs, k]
    # Input (prompt) logprobs, extend only: for request i, positions from
    # extend_logprob_start_lens_cpu[i] to extend_seq_lens_cpu[i] - 1 of its new tokens; the logprob
    # at new-token position j is that of token j+1 (the last position scores the sampled token and is
    # left out), concatenated over requests in batch order.
    input_token_logprobs: Optional[torch.Tensor] = None  # float32 [n_selected]
    input_top_logprobs_val: Optional[torch.Tensor] = None  # float32 [n_selected, k]
    input_top_logprobs_idx: Optional[torch.Tensor] = None  # int64 [n_selected, k]
