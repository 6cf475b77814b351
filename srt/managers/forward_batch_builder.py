"""ScheduleBatch (CPU, requests) -> ForwardBatch (tensors) and SamplingBatchInfo.

Extend rows cover `fill_ids[prefix_len : prefix_len + extend_len]`; decode rows feed the
last output token at position `kv_committed_len`. MIXED batches lay decodes out as
1-token extends after the prefill rows. `PersistentDecodeBatch` carries a decode batch's
tensors to the next decode of the same requests, so a steady decode step costs a few
tensor ops instead of a rebuild over every request.
"""

from __future__ import annotations

from array import array
from typing import Optional

import torch

from radixlm.constrained.vocab_mask import build_batch_vocab_mask
from radixlm.managers.schedule_batch import Req, ScheduleBatch
from radixlm.model_executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.sampling.sampling_batch_info import SamplingBatchInfo


def _i64(values: list[int], device: torch.device) -> torch.Tensor:
    # through a C array: 2-3x faster than torch.tensor(list) (scheduler overhead at 256 requests)
    if not values:
        return torch.empty(0, dtype=torch.int64, device=device)
    return torch.frombuffer(array("q", values), dtype=torch.int64).to(device)


def _columns(parts: list, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
    """Several 1-D columns (lists of numbers) on `device` with one host-to-device copy instead of one each
    (a prefill's build made ~10 small pageable copies): views of one buffer, in order."""
    code = "q" if dtype == torch.int64 else "f"
    cpu = [torch.frombuffer(array(code, p), dtype=dtype) if p else torch.empty(0, dtype=dtype) for p in parts]
    if device.type == "cpu":
        return cpu
    return list(torch.cat(cpu).to(device).split([t.numel() for t in cpu]))


def input_logprob_start(req: Req, prefix_len: int, extend_len: int) -> int:
    """First new-token position whose next-token logprob is an input logprob (extend_len: none)."""
    if not req.wants_input_logprobs():
        return extend_len
    first_scoring_pos = max(req.logprob_start_len, 1) - 1  # absolute position scoring token start
    return min(extend_len, max(0, first_scoring_pos - prefix_len))


def build_sampling_info(reqs: list[Req], vocab_size: int, device: torch.device,
                        step_offsets: Optional[list[int]] = None) -> SamplingBatchInfo:
    params = [r.sampling_params for r in reqs]
    temps = [p.temperature for p in params]
    top_ks = [vocab_size if p.top_k in (-1, 0) or p.top_k >= vocab_size else p.top_k for p in params]
    temperatures, top_ps, min_ps = _columns([temps, [p.top_p for p in params], [p.min_p for p in params]],
                                            torch.float32, device)
    top_ks_t, seeds, steps = _columns(
        [top_ks, [r.seed for r in reqs],
         [len(r.output_ids) + (step_offsets[i] if step_offsets else 0) for i, r in enumerate(reqs)]],
        torch.int64, device)
    info = SamplingBatchInfo(
        temperatures=temperatures.view(-1, 1),
        top_ps=top_ps,
        top_ks=top_ks_t,
        min_ps=min_ps,
        seeds=seeds,
        steps=steps,
        is_all_greedy=all(t == 0.0 for t in temps),
        need_top_p_sampling=any(p.top_p < 1.0 for p in params),
        need_top_k_sampling=any(k < vocab_size for k in top_ks),
        need_min_p_sampling=any(p.min_p > 0 for p in params),
        # Matchers are up to date here: constrained batches never lag (OverlapLoop._can_lag)
        vocab_bitmask=build_batch_vocab_mask([r.grammar for r in reqs], vocab_size, device),
    )
    if any(p.frequency_penalty or p.presence_penalty or p.repetition_penalty != 1.0 for p in params):
        _attach_penalties(info, reqs, vocab_size, device)
    if any(p.logit_bias for p in params):
        info.logit_bias = _logit_bias(params, vocab_size, device)
    return info


def _logit_bias(params: list, vocab_size: int, device: torch.device) -> torch.Tensor:
    """float32 [bs, vocab]: each request's `logit_bias` (normalized: int ids, verified in range) as a dense row."""
    rows, cols, values = [], [], []
    for i, p in enumerate(params):
        for token, bias in (p.logit_bias or {}).items():
            rows.append(i)
            cols.append(token)
            values.append(bias)
    rows_t, cols_t = _columns([rows, cols], torch.int64, device)
    (values_t,) = _columns([values], torch.float32, device)
    bias_t = torch.zeros((len(params), vocab_size), dtype=torch.float32, device=device)
    bias_t[rows_t, cols_t] = values_t
    return bias_t


def _attach_penalties(info: SamplingBatchInfo, reqs: list[Req], vocab_size: int, device: torch.device) -> None:
    def column(name: str) -> torch.Tensor:
        return torch.tensor([getattr(r.sampling_params, name) for r in reqs], dtype=torch.float32,
                            device=device).view(-1, 1)

    counts = torch.zeros((len(reqs), vocab_size), dtype=torch.float32, device=device)
    for i, req in enumerate(reqs):
        if req.output_ids:
            ids = torch.tensor(req.output_ids, dtype=torch.int64, device=device)
            counts[i].scatter_add_(0, ids, torch.ones_like(ids, dtype=torch.float32))
    info.frequency_penalties = column("frequency_penalty")
    info.presence_penalties = column("presence_penalty")
    info.repetition_penalties = column("repetition_penalty")
    info.output_token_counts = counts


def build_extend(batch: ScheduleBatch, vocab_size: int, device: torch.device) -> ForwardBatch:
    input_ids: list[int] = []
    positions: list[int] = []
    starts: list[int] = []
    logprob_starts: list[int] = []
    for req, prefix_len, extend_len in zip(batch.reqs, batch.prefix_lens, batch.extend_lens):
        starts.append(len(input_ids))
        if req in batch.decoding_reqs:
            input_ids.append(req.output_ids[-1])
        else:
            input_ids.extend(req.fill_ids[prefix_len:prefix_len + extend_len])
        positions.extend(range(prefix_len, prefix_len + extend_len))
        logprob_starts.append(input_logprob_start(req, prefix_len, extend_len))
    seq_lens = [p + e for p, e in zip(batch.prefix_lens, batch.extend_lens)]
    ids_t, positions_t, pool_t, seq_lens_t, prefix_t, extend_t, starts_t = _columns(
        [input_ids, positions, [r.req_pool_idx for r in batch.reqs], seq_lens, batch.prefix_lens, batch.extend_lens,
         starts], torch.int64, device)
    return ForwardBatch(
        forward_mode=batch.forward_mode,
        batch_size=len(batch.reqs),
        input_ids=ids_t,
        positions=positions_t,
        req_pool_indices=pool_t,
        seq_lens=seq_lens_t,
        out_cache_loc=batch.out_cache_loc.to(device),  # the slot allocator's free list lives on the device
        seq_lens_cpu=seq_lens,
        sampling_info=build_sampling_info(batch.reqs, vocab_size, device),
        extend_prefix_lens=prefix_t,
        extend_seq_lens=extend_t,
        extend_start_loc=starts_t,
        extend_prefix_lens_cpu=list(batch.prefix_lens),
        extend_seq_lens_cpu=list(batch.extend_lens),
        return_logprob=batch.return_logprob(),
        top_logprobs_nums=[r.top_logprobs_num if r.return_logprob else 0 for r in batch.reqs],
        extend_logprob_start_lens_cpu=logprob_starts,
    )


def build_decode(batch: ScheduleBatch, vocab_size: int, device: torch.device,
                 step_offsets: Optional[list[int]] = None) -> ForwardBatch:
    """Called before `kv_committed_len` advances. With `step_offsets` (overlap), rows whose token
    the CPU has not seen yet carry a stale id that the forward thread overwrites."""
    reqs = batch.reqs
    positions = [r.kv_committed_len for r in reqs]
    seq_lens = [p + 1 for p in positions]
    input_ids = _i64([r.output_ids[-1] for r in reqs], device)
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE,
        batch_size=len(reqs),
        input_ids=input_ids,
        positions=_i64(positions, device),
        req_pool_indices=_i64([r.req_pool_idx for r in reqs], device),
        seq_lens=_i64(seq_lens, device),
        out_cache_loc=batch.out_cache_loc.to(device),
        seq_lens_cpu=seq_lens,
        sampling_info=build_sampling_info(reqs, vocab_size, device, step_offsets),
        return_logprob=batch.return_logprob(),
        top_logprobs_nums=[r.top_logprobs_num if r.return_logprob else 0 for r in reqs],
    )


class PersistentDecodeBatch:
    """The last decode batch's tensors, carried over while the next decode runs the same requests.

    Between two decodes of the same requests (same order; an extend of other requests may run
    in between) every row advances by exactly one token and one KV slot, so the next
    ForwardBatch is the previous one moved by one step: positions are the previous `seq_lens`,
    `seq_lens + 1`, sampling `steps + 1`, and the input ids are the previous batch's sampled
    tokens when they are in (`note_output`; the overlap loop resolves them on the forward
    thread instead); `req_pool_indices` and the sampling parameters are reused. Updates make
    new tensors (never in place): the batch in flight keeps its own, and nothing syncs the
    device. Anything else (a changed membership, a MIXED batch, a batch whose sampling state
    changes per step: grammar masks, penalties) rebuilds from the requests. Every rank sees
    the same batches, so every rank takes the same path.
    """

    def __init__(self, vocab_size: int, device: torch.device) -> None:
        self.vocab_size = vocab_size
        self.device = device
        self.reqs: Optional[list[Req]] = None
        self.last: Optional[ForwardBatch] = None
        self.last_tokens: Optional[torch.Tensor] = None  # what `last` sampled, once its result is in

    def invalidate(self) -> None:
        """A batch advanced some rows outside the decode (MIXED): they no longer move in lockstep."""
        self.reqs = self.last = self.last_tokens = None

    def note_output(self, forward_batch: ForwardBatch, next_token_ids: torch.Tensor) -> None:
        """`forward_batch` sampled `next_token_ids` (on its device); kept if it is the latest decode."""
        if forward_batch is self.last:
            self.last_tokens = next_token_ids

    def build(self, batch: ScheduleBatch, step_offsets: Optional[list[int]] = None) -> ForwardBatch:
        """The decode ForwardBatch of `batch` (before `kv_committed_len` advances); see `build_decode`."""
        last = self.last
        if last is not None and batch.reqs == self.reqs and not last.sampling_info.changes_per_step():
            fb = advance_decode(last, batch, self.device, self.last_tokens)
        else:
            fb = build_decode(batch, self.vocab_size, self.device, step_offsets)
        self.reqs, self.last, self.last_tokens = batch.reqs, fb, None
        return fb


def advance_decode(last: ForwardBatch, batch: ScheduleBatch, device: torch.device,
                   last_tokens: Optional[torch.Tensor] = None) -> ForwardBatch:
    """The decode after `last` over the same requests: a few tensor ops, no per-request tensors.
    `last_tokens` (what `last` sampled) are the input ids; without them, each row's last output id."""
    if last_tokens is not None:
        input_ids = last_tokens.long()  # no copy when already int64 (ForwardOutput's contract)
    else:
        input_ids = _i64([r.output_ids[-1] for r in batch.reqs], device)
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE,
        batch_size=last.batch_size,
        input_ids=input_ids,
        positions=last.seq_lens,
        req_pool_indices=last.req_pool_indices,
        seq_lens=last.seq_lens + 1,
        out_cache_loc=batch.out_cache_loc.to(device),
        seq_lens_cpu=[n + 1 for n in last.seq_lens_cpu],
        sampling_info=last.sampling_info.next_step(),
        return_logprob=last.return_logprob,
        top_logprobs_nums=last.top_logprobs_nums,
    )
