"""From final hidden states to logits (and input-token logprobs).

Extend: the last new token of each request gives its next-token logits. Decode: every
token does. When `forward_batch.return_logprob`, extend batches also score the prompt:
for request i, new-token positions `extend_logprob_start_lens_cpu[i]` ..
`extend_seq_lens_cpu[i] - 2` give the logprob of the *next* input token (the last
position scores the sampled token, reported separately) — see `ForwardOutput`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
from torch import nn

from radixlm.distributed import tensor_model_parallel_all_gather
from radixlm.layers.kernel_dispatch import gemv_kernel_for
from radixlm.layers.row_slices import row_slices

if TYPE_CHECKING:
    from radixlm.layers.layernorm import RMSNorm
    from radixlm.model_executor.forward_batch import ForwardBatch


LOGPROB_SLICE_ELEMENTS = 1 << 25  # prompt logprobs: rows x vocab per slice (256 rows at a 128k vocabulary)


@dataclass
class LogitsProcessorOutput:
    next_token_logits: torch.Tensor  # float32 [bs, vocab]
    input_token_logprobs: Optional[torch.Tensor] = None  # float32 [n_selected]
    input_top_logprobs_val: Optional[torch.Tensor] = None  # float32 [n_selected, k]
    input_top_logprobs_idx: Optional[torch.Tensor] = None  # int64 [n_selected, k]
    # int64 [bs]: argmax of next_token_logits, where the forward computed it beside them (CUDA decode graphs)
    next_token_greedy_ids: Optional[torch.Tensor] = None


class LogitsProcessor(nn.Module):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, input_ids: torch.Tensor, hidden_states: torch.Tensor, lm_head: nn.Module,
                forward_batch: "ForwardBatch", residual: Optional[torch.Tensor] = None,
                norm: Optional["RMSNorm"] = None, last_rows_only: bool = False) -> LogitsProcessorOutput:
        """With `norm`, `hidden_states` and `residual` are the last layer's outputs and the model's final
        norm, `norm(hidden_states + residual)`, is applied here: small batches fold it into the LM head GEMV.
        `last_rows_only`: an extend whose model computed one row per request (its last new token) instead
        of one per new token; the prompt logprobs need them all, so it excludes `return_logprob`."""
        if last_rows_only and forward_batch.return_logprob:
            raise ValueError("input-token logprobs read every new token's hidden state, not last_rows_only")
        if norm is not None and forward_batch.return_logprob and forward_batch.forward_mode.is_extend():
            # the prompt logprobs read every position: normalise them all first
            hidden_states, residual, norm = final_norm(norm, hidden_states, residual), None, None
        if forward_batch.forward_mode.is_decode() or last_rows_only:
            last_hidden, last_residual = hidden_states, residual
        else:
            last_index = forward_batch.last_token_index()
            last_hidden = hidden_states[last_index]
            last_residual = residual[last_index] if residual is not None else None
        out = LogitsProcessorOutput(next_token_logits=self.compute_logits(last_hidden, lm_head, last_residual, norm))
        if forward_batch.return_logprob and forward_batch.forward_mode.is_extend():
            self._add_input_logprobs(out, input_ids, hidden_states, lm_head, forward_batch)
        return out

    def compute_logits(self, hidden: torch.Tensor, lm_head: nn.Module, residual: Optional[torch.Tensor] = None,
                       norm: Optional["RMSNorm"] = None) -> torch.Tensor:
        """float32 `[tokens, vocab]` logits of `hidden`, or of `norm(hidden + residual)` with `norm`."""
        kernel = gemv_kernel_for(hidden, lm_head.weight, "lm_head")
        if kernel is not None and (residual is None or residual.stride(-1) == 1):
            if norm is None:
                logits = kernel.linear_gemv(hidden, lm_head.weight, out_dtype=torch.float32)
            else:
                logits, _ = kernel.rmsnorm_gemv(hidden, residual, norm.weight, norm.variance_epsilon, lm_head.weight,
                                                store_residual=False, out_dtype=torch.float32)
        else:
            if norm is not None:
                hidden = final_norm(norm, hidden, residual)
            logits = torch.matmul(hidden, lm_head.weight.T)
        logits = tensor_model_parallel_all_gather(logits, dim=-1)
        return logits[:, :self.vocab_size].float()

    def _add_input_logprobs(self, out: LogitsProcessorOutput, input_ids: torch.Tensor, hidden_states: torch.Tensor,
                            lm_head: nn.Module, fb: "ForwardBatch") -> None:
        rows: list[int] = []
        offset = 0
        starts = fb.extend_logprob_start_lens_cpu or [0] * fb.batch_size
        for start, length in zip(starts, fb.extend_seq_lens_cpu):
            rows.extend(range(offset + start, offset + length - 1))
            offset += length
        row_t = torch.tensor(rows, dtype=torch.int64, device=hidden_states.device)
        k = max(fb.top_logprobs_nums or [0])
        # a slice of rows at a time: a whole 8,192-token chunk's bf16 logits, their float32 copy and the
        # log-softmax would take ~10 GB at a 128k vocabulary, more than --mem-fraction-static leaves
        parts = [self._score_rows(row_t[s], input_ids, hidden_states, lm_head, k)
                 for s in row_slices(len(rows), self.vocab_size, LOGPROB_SLICE_ELEMENTS)]
        out.input_token_logprobs = torch.cat([p[0] for p in parts])
        if k > 0:
            out.input_top_logprobs_val = torch.cat([p[1] for p in parts])
            out.input_top_logprobs_idx = torch.cat([p[2] for p in parts])

    def _score_rows(self, rows: torch.Tensor, input_ids: torch.Tensor, hidden_states: torch.Tensor,
                    lm_head: nn.Module, k: int) -> tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
        """The logprob of the input token after each of `rows`, and its top `k` alternatives if k > 0."""
        logprobs = torch.log_softmax(self.compute_logits(hidden_states[rows], lm_head), dim=-1)
        picked = logprobs.gather(1, input_ids[rows + 1].unsqueeze(1)).squeeze(1)
        if k == 0:
            return picked, None, None
        val, idx = logprobs.topk(k, dim=-1)
        return picked, val, idx


def final_norm(norm: "RMSNorm", hidden: torch.Tensor, residual: Optional[torch.Tensor]) -> torch.Tensor:
    """`norm(hidden + residual)` (or `norm(hidden)`); on CUDA it may overwrite both inputs."""
    return norm(hidden) if residual is None else norm(hidden, residual)[0]


def next_token_logprobs(logits: torch.Tensor, next_token_ids: torch.Tensor, top_k: int
                        ) -> tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Logprob of each sampled token under the unprocessed distribution, and the top-`top_k` (or None)."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = logprobs.gather(1, next_token_ids.view(-1, 1)).squeeze(1)
    if top_k <= 0:
        return chosen, None, None
    val, idx = logprobs.topk(top_k, dim=-1)
    return chosen, val, idx
