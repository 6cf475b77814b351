"""Build ForwardBatches for static batches straight from the pools (tests, bench_one_batch).

The scheduler builds its own from ScheduleBatch; this is the minimal version: it
allocates KV slots, writes `req_to_token` rows and fills the extend/decode fields.
"""

from __future__ import annotations

from typing import Optional

import torch

from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.memory_pool import ReqToTokenPool
from radixlm.model_executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.sampling.sampling_batch_info import SamplingBatchInfo


class ForwardBatchBuilder:
    def __init__(self, req_to_token_pool: ReqToTokenPool, allocator: TokenToKVPoolAllocator) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.device = allocator.device

    @classmethod
    def for_runner(cls, model_runner: object) -> "ForwardBatchBuilder":
        return cls(model_runner.req_to_token_pool, model_runner.token_to_kv_pool_allocator)

    def _alloc(self, n: int) -> torch.Tensor:
        slots = self.allocator.alloc(n)
        if slots is None:
            raise RuntimeError(f"KV pool exhausted: need {n} slots, {self.allocator.available_size()} free")
        return slots

    def extend(self, rows: list[int], prefix_lens: list[int], new_ids: list[list[int]],
               sampling_info: Optional[SamplingBatchInfo] = None, return_logprob: bool = False,
               top_logprobs_nums: Optional[list[int]] = None,
               logprob_start_lens: Optional[list[int]] = None) -> ForwardBatch:
        """Requests in `rows` already hold `prefix_lens[i]` tokens in the pool and add `new_ids[i]`."""
        ext_lens = [len(ids) for ids in new_ids]
        seq_lens = [p + e for p, e in zip(prefix_lens, ext_lens)]
        out_cache_loc = self._alloc(sum(ext_lens))
        offset, positions = 0, []
        for row, prefix, ext in zip(rows, prefix_lens, ext_lens):
            self.req_to_token_pool.write(row, prefix, out_cache_loc[offset:offset + ext])
            positions.append(torch.arange(prefix, prefix + ext))
            offset += ext
        dev = self.device
        starts = [sum(ext_lens[:i]) for i in range(len(rows))]
        return ForwardBatch(
            forward_mode=ForwardMode.EXTEND, batch_size=len(rows),
            input_ids=torch.tensor([t for ids in new_ids for t in ids], dtype=torch.int64, device=dev),
            positions=torch.cat(positions).to(dev),
            req_pool_indices=torch.tensor(rows, dtype=torch.int64, device=dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int64, device=dev),
            out_cache_loc=out_cache_loc, seq_lens_cpu=seq_lens, sampling_info=sampling_info,
            extend_prefix_lens=torch.tensor(prefix_lens, dtype=torch.int64, device=dev),
            extend_seq_lens=torch.tensor(ext_lens, dtype=torch.int64, device=dev),
            extend_start_loc=torch.tensor(starts, dtype=torch.int64, device=dev),
            extend_prefix_lens_cpu=list(prefix_lens), extend_seq_lens_cpu=ext_lens,
            return_logprob=return_logprob, top_logprobs_nums=top_logprobs_nums,
            extend_logprob_start_lens_cpu=logprob_start_lens or [0] * len(rows))

    def decode(self, rows: list[int], seq_lens_before: list[int], last_token_ids: torch.Tensor,
               sampling_info: Optional[SamplingBatchInfo] = None) -> ForwardBatch:
        """One new token per request: `last_token_ids` (device tensor, no host copy) at position seq_len."""
        dev = self.device
        bs = len(rows)
        out_cache_loc = self._alloc(bs)
        rows_t = torch.tensor(rows, dtype=torch.int64, device=dev)
        positions = torch.tensor(seq_lens_before, dtype=torch.int64, device=dev)
        self.req_to_token_pool.req_to_token[rows_t, positions] = out_cache_loc.to(torch.int32)
        seq_lens = [n + 1 for n in seq_lens_before]
        return ForwardBatch(
            forward_mode=ForwardMode.DECODE, batch_size=bs, input_ids=last_token_ids.view(-1).to(torch.int64),
            positions=positions, req_pool_indices=rows_t,
            seq_lens=torch.tensor(seq_lens, dtype=torch.int64, device=dev),
            out_cache_loc=out_cache_loc, seq_lens_cpu=seq_lens, sampling_info=sampling_info)

    def decode_next(self, last: ForwardBatch, last_token_ids: torch.Tensor) -> ForwardBatch:
        """The decode step after `last` (a decode or an extend of the same rows), built from its device
        tensors as the scheduler's steady decode does: one slot allocation and one table write, no
        host-to-device copies. `last_token_ids` are what `last` sampled."""
        if last.forward_mode.is_extend() and any(n <= 0 for n in last.extend_seq_lens_cpu):
            raise ValueError("decode_next needs every row of the extend to have new tokens")
        out_cache_loc = self._alloc(last.batch_size)
        positions = last.seq_lens
        self.req_to_token_pool.req_to_token[last.req_pool_indices, positions] = out_cache_loc.to(torch.int32)
        return ForwardBatch(
            forward_mode=ForwardMode.DECODE, batch_size=last.batch_size,
            input_ids=last_token_ids.view(-1).to(torch.int64), positions=positions,
            req_pool_indices=last.req_pool_indices, seq_lens=last.seq_lens + 1, out_cache_loc=out_cache_loc,
            seq_lens_cpu=[n + 1 for n in last.seq_lens_cpu], sampling_info=last.sampling_info)

    def release(self, rows: list[int], seq_lens: list[int]) -> None:
        """Free the KV slots and rows of finished requests."""
        table = self.req_to_token_pool.req_to_token
        for row, n in zip(rows, seq_lens):
            self.allocator.free(table[row, :n].to(torch.int64))
        self.req_to_token_pool.free(list(rows))


def generate_static_batch(model_runner: object, prompts: list[list[int]], max_new_tokens: int,
                          split_at: Optional[list[int]] = None) -> list[list[int]]:
    """Greedy-generate `max_new_tokens` for every prompt in one static batch (prefill, then decode steps).

    With `split_at`, prompt i is prefilled in two extends: its first `split_at[i]` tokens, then the
    rest over that cached prefix. Frees everything it allocated.
    """
    builder = ForwardBatchBuilder.for_runner(model_runner)
    rows = model_runner.req_to_token_pool.alloc(len(prompts))
    if rows is None:
        raise RuntimeError(f"no free request rows for a batch of {len(prompts)}")
    prefix = [0] * len(prompts)
    if split_at is not None:
        model_runner.forward(builder.extend(rows, prefix, [p[:s] for p, s in zip(prompts, split_at)]))
        prefix = list(split_at)
    out = model_runner.forward(builder.extend(rows, prefix, [p[n:] for p, n in zip(prompts, prefix)]))
    tokens = [out.next_token_ids]
    seq_lens = [len(p) for p in prompts]
    for _ in range(max_new_tokens - 1):
        out = model_runner.forward(builder.decode(rows, seq_lens, tokens[-1]))
        tokens.append(out.next_token_ids)
        seq_lens = [n + 1 for n in seq_lens]
    builder.release(rows, seq_lens)
    return torch.stack(tokens, dim=1).tolist()
