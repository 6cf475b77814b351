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


def start_host_copy(out: ForwardOutput) -> Optional["torch.cuda.Event"]:
    """Start copying a CUDA ForwardOutput to pinned host memory; return the event that marks it done.

    The copy is queued right behind the forward, so waiting on the event waits for this batch
    only, not for a batch launched after it (as `.tolist()` on the stream would): this is what
    lets the overlap loop process batch N while batch N+1 runs. None on the CPU.
    """
    if not out.next_token_ids.is_cuda:
        return None
    for name, value in list(vars(out).items()):
        if isinstance(value, torch.Tensor):
            host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            host.copy_(value, non_blocking=True)
            setattr(out, name + "_host", host)
    event = torch.cuda.Event()
    event.record()
    return event


def finish_host_copy(out: ForwardOutput, event: Optional["torch.cuda.Event"]) -> ForwardOutput:
    """Wait for `start_host_copy` and return a ForwardOutput whose tensors live on the host."""
    if event is None:
        return out
    event.synchronize()
    host = {name: getattr(out, name + "_host", None) for name in ForwardOutput.__dataclass_fields__}
    return ForwardOutput(**{name: host[name] if host[name] is not None else getattr(out, name) for name in host})
