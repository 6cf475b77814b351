"""Turns one forward's result into request state: append tokens, check finishes, cache, and
send increments to the detokenizer.

Finish rules, in order: an abort flag; a terminated grammar (its matcher accepted a stop
token; `stop`, even with `ignore_eos`); `max_new_tokens`; the model's EOS ids (unless
`ignore_eos`) and `stop_token_ids` (only after `min_new_tokens`); stop strings, checked on
the decoded tail of the output (the detokenizer trims them from the text).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from radixlm.managers.io_struct import BatchTokenIDOut, DetokenizeParams, OutputMetas, ReqLogprobs
from radixlm.managers.schedule_batch import Req, ScheduleBatch
from radixlm.managers.steady_decode import SteadyDecode

if TYPE_CHECKING:
    from radixlm.managers.scheduler import GenerationBatchResult, Scheduler


class SchedulerOutput:
    def __init__(self, scheduler: "Scheduler") -> None:
        self.s = scheduler
        self.kv = scheduler.kv
        tokenizer_eos = getattr(scheduler.tokenizer, "eos_token_id", None)
        eos_ids = set(scheduler.model_config.eos_token_ids or ())
        if tokenizer_eos is not None:
            eos_ids.add(int(tokenizer_eos))
        self.eos_ids = frozenset(eos_ids)
        self.stream_interval = scheduler.server_args.stream_interval
        self.steady: Optional[SteadyDecode] = None  # the decode fast path (see steady_decode.py)

    # ---- results -----------------------------------------------------------------------------
    def process(self, batch: ScheduleBatch, result: "GenerationBatchResult") -> None:
        out = result.forward_output
        next_ids = out.next_token_ids.tolist()
        self.s.stats.forward_time_s += result.forward_time_s
        self.s.stats.record_batch(not batch.forward_mode.is_extend(), len(batch.reqs), sum(batch.extend_lens or ()))
        logprobs = _LogprobView(out, batch) if batch.forward_batch.return_logprob else None
        if batch.forward_mode.is_decode():
            if logprobs is None and self._append_steady(batch.reqs, next_ids):
                self.s.stats.record_generated(len(batch.reqs))
                return
            done, new_running, to_send = self._process_decode(batch.reqs, next_ids, logprobs)
            self.s.stats.record_generated(len(batch.reqs))  # every decode row has output and is not chunked
        else:
            if batch.decoding_reqs:
                self.steady = None  # MIXED: running rows gain tokens here
            done, new_running, to_send = self._process_extend(batch, next_ids, logprobs)
            self.s.stats.record_generated(sum(1 for r in batch.reqs if r.output_ids and not r.is_chunked))
        if done or new_running:
            self._update_running(done, new_running)
        for req in done:
            self.kv.release_req(req)
        self.send(to_send)

    def _append_steady(self, reqs: list[Req], next_ids: list[int]) -> bool:
        """The fast path: True if this step only appended tokens (nothing finished, nothing to send)."""
        if self.steady is None or reqs != self.steady.reqs:
            self.steady = SteadyDecode.plan(reqs)
        if self.steady is not None and self.steady.try_append(reqs, next_ids):
            return True
        self.steady = None  # the full loop changes what the plan assumed: plan again next step
        return False

    def _process_decode(self, reqs: list[Req], next_ids: list[int],
                        logprobs: Optional["_LogprobView"]) -> tuple[list[Req], list[Req], list[Req]]:
        """The per-row loop (one token per row): a full finish check only where one can fire (`check_finished`)."""
        done: list[Req] = []
        to_send: list[Req] = []
        for i, (req, token) in enumerate(zip(reqs, next_ids)):
            if req.finished_reason is not None:
                continue  # overlap: it finished in the previous batch; this token is dropped
            if req.to_abort is not None:
                req.finished_reason = {"type": "abort", "message": req.to_abort}
            else:
                output_ids = req.output_ids
                output_ids.append(token)
                if logprobs is not None and req.return_logprob:
                    logprobs.add_output(req, i, token)
                if len(output_ids) >= req.finish_check_len or token in req.finish_check_tokens:
                    self.check_finished(req)
            if req.finished_reason is not None:
                done.append(req)
                to_send.append(req)
            elif req.stream and self._should_send(req):
                to_send.append(req)
        return done, [], to_send

    def _process_extend(self, batch: ScheduleBatch, next_ids: list[int],
                        logprobs: Optional["_LogprobView"]) -> tuple[list[Req], list[Req], list[Req]]:
        done: list[Req] = []
        still_running: list[Req] = []
        decoding = {id(r) for r in batch.decoding_reqs}  # a set: MIXED batches can hold hundreds
        for i, req in enumerate(batch.reqs):
            if req.finished():
                continue  # overlap: it finished in the previous batch; this token is dropped
            if id(req) not in decoding:
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
        done_ids = {id(r) for r in done}
        to_send = [r for r in batch.reqs if self._should_send(r) and (not r.finished() or id(r) in done_ids)]
        return done, still_running, to_send

    def _update_running(self, done: list[Req], new_running: list[Req]) -> None:
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
        if req.finished_reason is not None:
            return
        self._arm_finish_check(req)
        if len(out) < params.min_new_tokens:
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

    def _arm_finish_check(self, req: Req) -> None:
        """Set when the decode loop must call `check_finished` again: at `finish_check_len` tokens
        (max_new_tokens or the context length, whichever comes first) or on a token in
        `finish_check_tokens` (EOS unless ignored, stop_token_ids). Grammars and stop strings can
        finish on any token, so those requests are checked on every token."""
        params = req.sampling_params
        if req.grammar is not None or (params.stop and params.stop_strs):
            req.finish_check_len = 0
            return
        req.finish_check_len = min(params.max_new_tokens, self.s.model_config.context_len - len(req.origin_input_ids))
        eos = frozenset() if params.ignore_eos else self.eos_ids
        req.finish_check_tokens = eos.union(params.stop_token_ids or ())

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
        """One message for the step: columns of plain values, no per-request objects (cheap to pickle)."""
        if not reqs:
            return
        rids, new_ids, logprobs, metas, params = [], [], [], OutputMetas(), {}
        for req in reqs:
            output_ids = req.output_ids
            if req.sent_output_len == 0:  # its first message (every later one carries new tokens or is final)
                p = req.sampling_params
                params[req.rid] = DetokenizeParams(p.skip_special_tokens, p.no_stop_trim, p.stop_strs)
            rids.append(req.rid)
            new_ids.append(output_ids[req.sent_output_len:])
            req.sent_output_len = len(output_ids)
            metas.prompt_tokens.append(len(req.origin_input_ids))
            metas.completion_tokens.append(len(output_ids))
            metas.cached_tokens.append(req.cached_tokens)
            metas.finish_reasons.append(req.finished_reason)
            metas.retractions.append(req.num_retractions)
            logprobs.append(req.pending_logprobs)
            req.pending_logprobs = None
            if req.finished_reason is not None:
                self.s.stats.num_finished += 1
                self.s.stats.num_aborted += req.finished_reason.get("type") == "abort"
        self.s.io.send_to_detokenizer(BatchTokenIDOut(rids=rids, new_output_ids=new_ids, metas=metas,
                                                      logprobs=logprobs, detokenize_params=params))


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
