"""Turns one forward's result into request state: append tokens, check finishes, cache, and
send increments to the detokenizer.

Finish rules, in order: an abort flag; a terminated grammar (its matcher accepted a stop
token; `stop`, even with `ignore_eos`); `max_new_tokens`; the model's EOS ids (unless
`ignore_eos`) and `stop_token_ids` (only after `min_new_tokens`); stop strings, checked on
the decoded tail of the output (the detokenizer trims them from the text).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from radixlm.managers.io_struct import BatchTokenIDOut, ReqLogprobs, ReqOutputMeta
from radixlm.managers.schedule_batch import Req, ScheduleBatch

if TYPE_CHECKING:
    from radixlm.managers.scheduler import GenerationBatchResult, Scheduler


class SchedulerOutput:
    def __init__(self, scheduler: "Scheduler") -> None:
        self.s = scheduler
        self.kv = scheduler.kv
        tokenizer_eos = getattr(scheduler.tokenizer, "eos_token_id", None)
        self.eos_ids = set(scheduler.model_config.eos_token_ids or ())
        if tokenizer_eos is not None:
            self.eos_ids.add(int(tokenizer_eos))
        self.stream_interval = scheduler.server_args.stream_interval

    # ---- results -----------------------------------------------------------------------------
    def process(self, batch: ScheduleBatch, result: "GenerationBatchResult") -> None:
        out = result.forward_output
        next_ids = out.next_token_ids.tolist()
        self.s.stats.forward_time_s += result.forward_time_s
        logprobs = _LogprobView(out, batch) if batch.return_logprob() else None
        done: list[Req] = []
        still_running: list[Req] = []
        is_extend = batch.forward_mode.is_extend()
        decoding = {id(r) for r in batch.decoding_reqs}  # a set: MIXED batches can hold hundreds
        for i, req in enumerate(batch.reqs):
            if req.finished():
                continue  # overlap: it finished in the previous batch; this token is dropped
            if is_extend and id(req) not in decoding:
                if logprobs is not None and req.wants_input_logprobs():
                    logprobs.add_input(req, i, batch.prefix_lens[i], batch.extend_lens[i])
                if req.is_chunked:
                    self.kv.cache_chunk(req)
                    continue
                req.input_logprobs_done = True
                if req.sampling_params.max_new_tokens == 0:
                    req.finished_reason = {"type": "length", "length": 0}
                    done.append(req)
                    continue
                self.kv.cache_chunk(req)  # the prompt is in the tree now: later requests share it
                still_running.append(req)
            if req.to_abort is not None:
                req.finished_reason = {"type": "abort", "message": req.to_abort}
            else:
                req.output_ids.append(next_ids[i])
                if logprobs is not None and req.return_logprob:
                    logprobs.add_output(req, i, next_ids[i])
                self.check_finished(req)
            if req.finished():
                done.append(req)
        self.s.stats.record_generated(sum(1 for r in batch.reqs if r.output_ids and not r.is_chunked))
        self._update_running(batch, done, still_running)
        for req in done:
            self.kv.release_req(req)
        self.send([r for r in batch.reqs if self._should_send(r) and (not r.finished() or r in done)])

    def _update_running(self, batch: ScheduleBatch, done: list[Req], new_running: list[Req]) -> None:
        done_ids = {id(r) for r in done}
        running_ids = {id(r) for r in self.s.running}
        self.s.running = [r for r in self.s.running if id(r) not in done_ids]
        self.s.running += [r for r in new_running if id(r) not in done_ids and id(r) not in running_ids]

    def check_finished(self, req: Req) -> None:
        params = req.sampling_params
        out = req.output_ids
        if req.grammar is not None and self.advance_grammar(req, out[-1]):
            return
        if len(out) >= params.max_new_tokens:
            req.finished_reason = {"type": "length", "length": params.max_new_tokens}
        if req.finished_reason is not None or len(out) < params.min_new_tokens:
            return
        last = out[-1]
        if (not params.ignore_eos and last in self.eos_ids) or last in (params.stop_token_ids or ()):
            req.finished_reason = {"type": "stop", "matched": last}
            return
        stops = params.stop_strs if params.stop else ()
        if stops:
            window = max(len(s) for s in stops) + 2
            tail = self.s.tokenizer.decode(out[-window:], skip_special_tokens=params.skip_special_tokens)
            for stop in stops:
                if stop in tail:
                    req.finished_reason = {"type": "stop", "matched": stop}
                    return
        if req.seqlen >= self.s.model_config.context_len:
            req.finished_reason = {"type": "length", "length": len(out)}

    @staticmethod
    def advance_grammar(req: Req, token: int) -> bool:
        """The matcher accepts the sampled token; True if that finished the request."""
        try:
            req.grammar.accept_token(token)
        except ValueError as err:  # the mask forbade it, so this is a bug: end the request, not the server
            req.finished_reason = {"type": "abort", "message": f"grammar rejected a sampled token: {err}"}
            return True
        if req.grammar.is_terminated():
            req.finished_reason = {"type": "stop", "matched": token}
            return True
        return False

    # ---- sending -----------------------------------------------------------------------------
    def _should_send(self, req: Req) -> bool:
        if req.finished():
            return True
        if not req.stream or req.is_chunked:
            return False
        pending = len(req.output_ids) - req.sent_output_len
        return pending >= self.stream_interval or (pending > 0 and req.sent_output_len == 0)

    def send(self, reqs: list[Req]) -> None:
        if not reqs:
            return
        new_ids, metas, logprobs = [], [], []
        for req in reqs:
            new_ids.append(req.output_ids[req.sent_output_len:])
            req.sent_output_len = len(req.output_ids)
            metas.append(ReqOutputMeta(prompt_tokens=len(req.origin_input_ids),
                                       completion_tokens=len(req.output_ids), cached_tokens=req.cached_tokens,
                                       finish_reason=req.finished_reason, retractions=req.num_retractions))
            logprobs.append(req.pending_logprobs)
            req.pending_logprobs = None
            if req.finished():
                self.s.stats.num_finished += 1
                self.s.stats.num_aborted += req.finished_reason.get("type") == "abort"
        self.s.io.send_to_detokenizer(BatchTokenIDOut(
            rids=[r.rid for r in reqs], new_output_ids=new_ids, metas=metas,
            skip_special_tokens=[r.sampling_params.skip_special_tokens for r in reqs],
            no_stop_trim=[r.sampling_params.no_stop_trim for r in reqs],
            stop_strs=[r.sampling_params.stop_strs for r in reqs], logprobs=logprobs))


class _LogprobView:
    """Host copies of one forward's logprob tensors, sliced per request."""

    def __init__(self, out: Any, batch: ScheduleBatch) -> None:
        self.next_lp = _tolist(out.next_token_logprobs)
        self.next_top_val = _tolist(out.next_top_logprobs_val)
        self.next_top_idx = _tolist(out.next_top_logprobs_idx)
        self.in_lp = _tolist(out.input_token_logprobs) or []
        self.in_top_val = _tolist(out.input_top_logprobs_val)
        self.in_top_idx = _tolist(out.input_top_logprobs_idx)
        self.in_offsets: list[int] = []
        fb = batch.forward_batch
        offset = 0
        for start, length in zip(fb.extend_logprob_start_lens_cpu or [], fb.extend_seq_lens_cpu or []):
            self.in_offsets.append(offset)
            offset += max(0, length - 1 - start)

    @staticmethod
    def _acc(req: Req) -> ReqLogprobs:
        if req.pending_logprobs is None:
            req.pending_logprobs = ReqLogprobs()
        return req.pending_logprobs

    def _top(self, vals: Optional[list], idxs: Optional[list], row: int, k: int) -> Optional[list]:
        if k <= 0 or vals is None:
            return None
        return list(zip(vals[row][:k], idxs[row][:k]))

    def add_output(self, req: Req, i: int, token: int) -> None:
        acc = self._acc(req)
        acc.output_token_logprobs.append((self.next_lp[i], token))
        acc.output_top_logprobs.append(self._top(self.next_top_val, self.next_top_idx, i, req.top_logprobs_num))

    def add_input(self, req: Req, i: int, prefix_len: int, extend_len: int) -> None:
        acc = self._acc(req)
        start = req.logprob_start_len
        fb_start = max(0, max(start, 1) - 1 - prefix_len)
        if start == 0 and prefix_len == 0:
            acc.input_token_logprobs.append((None, req.fill_ids[0]))
            acc.input_top_logprobs.append(None)
        row = self.in_offsets[i]
        for j in range(fb_start, extend_len - 1):
            acc.input_token_logprobs.append((self.in_lp[row], req.fill_ids[prefix_len + j + 1]))
            acc.input_top_logprobs.append(self._top(self.in_top_val, self.in_top_idx, row, req.top_logprobs_num))
            row += 1
        boundary = prefix_len + extend_len
        if req.is_chunked and boundary < len(req.fill_ids) and boundary >= start:
            acc.input_token_logprobs.append((None, req.fill_ids[boundary]))  # scored by no position we keep
            acc.input_top_logprobs.append(None)


def _tolist(t: Any) -> Optional[list]:
    return None if t is None else t.tolist()
