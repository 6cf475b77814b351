"""Forms the next batch: a prefill from the waiting queue (PrefillAdder), else a decode of the
running requests, retracting some of them back to the queue when decode cannot get slots.

Retraction keeps prefixes: the retracted request's computed tokens are inserted into the
radix tree before its slots are released and pinned while it waits (`KVCacheManager.retract_req`),
so when it is admitted again its own prefix is a cache hit unless eviction really needed those slots.

The new-token ratio is the share of each running request's remaining `max_new_tokens`
that admission reserves; it decays towards its minimum each decode step and jumps back
to its initial value after a retraction (SGLang's defaults: 0.7, x0.14, 600 steps).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

from radixlm.managers.forward_batch_builder import PersistentDecodeBatch, build_extend
from radixlm.managers.schedule_batch import Req, ScheduleBatch
from radixlm.managers.schedule_policy import PrefillAdder, order_queue
from radixlm.model_executor.forward_batch import ForwardMode

if TYPE_CHECKING:
    from radixlm.managers.scheduler import Scheduler

logger = logging.getLogger(__name__)

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
# SGLang's retract_decode_steps: one retraction round frees room for this many decode steps, so
# it does not recur every few steps, each time eating the prefix it just kept before that
# request can resume (decode takes the oldest retained prefixes first, see RadixCache pins).
RETRACT_DECODE_STEPS = 20


class BatchPlanner:
    def __init__(self, scheduler: "Scheduler") -> None:
        self.s = scheduler
        self.kv = scheduler.kv
        args = scheduler.server_args
        self.init_new_token_ratio = min(1.0, INIT_NEW_TOKEN_RATIO * args.schedule_conservativeness)
        self.min_new_token_ratio = self.init_new_token_ratio * MIN_NEW_TOKEN_RATIO_FACTOR
        self.new_token_ratio_decay = (self.init_new_token_ratio - self.min_new_token_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.new_token_ratio = self.init_new_token_ratio
        self.chunked_req: Optional[Req] = None
        self.abort_pending = False  # some request got `to_abort` since the last apply_aborts
        self.chunk_size = args.chunked_prefill_size or -1
        self.vocab_size = scheduler.model_config.vocab_size
        self.device = scheduler.model_runner.device
        self.decode_batch = PersistentDecodeBatch(self.vocab_size, self.device)

    # ---- aborts ------------------------------------------------------------------------------
    def apply_aborts(self) -> None:
        """Requests flagged by an AbortReq leave here: slots back, finish_reason abort."""
        if not self.abort_pending:
            return
        self.abort_pending = False
        aborted = [r for r in self.s.running if r.to_abort is not None]
        if self.chunked_req is not None and self.chunked_req.to_abort is not None:
            aborted.append(self.chunked_req)
            self.chunked_req = None
        if not aborted:
            return
        self.s.running = [r for r in self.s.running if r.to_abort is None]
        for req in aborted:
            req.finished_reason = {"type": "abort", "message": req.to_abort}
            self.kv.release_req(req)
        self.s.output.send(aborted)

    # ---- prefill -----------------------------------------------------------------------------
    def get_new_batch_prefill(self) -> Optional[ScheduleBatch]:
        s = self.s
        if not s.waiting_queue and self.chunked_req is None:
            return None
        num_running = len(s.running) + (self.chunked_req is not None)
        max_new = min(s.max_running_requests - num_running, self.kv.free_rows())
        adder = PrefillAdder(self.kv, s.running, self.new_token_ratio, s.server_args.max_prefill_tokens,
                             self.chunk_size, max_new)
        if self.chunked_req is not None:
            adder.add_chunked_req(self.chunked_req)
            if self.chunked_req not in adder.can_run:
                return None  # wait for memory; decodes continue
        if max_new > 0 and adder.new_chunked_req is None:
            for req in order_queue(s.server_args.schedule_policy, s.waiting_queue, self.kv, s.rng):
                if not adder.add_one_req(req):
                    break
        if not adder.can_run:
            return None
        admitted = {id(r) for r in adder.can_run}
        s.waiting_queue = [r for r in s.waiting_queue if id(r) not in admitted]
        self.chunked_req = adder.new_chunked_req
        decoding = self._mixable_decodes(sum(r.extend_input_len for r in adder.can_run))
        return self.prepare_extend(adder.can_run, decoding)

    def _mixable_decodes(self, extend_tokens: int) -> list[Req]:
        """--enable-mixed-chunk: the running decodes ride along in the prefill's forward."""
        running = self.s.running
        if not self.s.server_args.enable_mixed_chunk or not running:
            return []
        if self.kv.available_tokens() < extend_tokens + len(running) or any(r.to_abort for r in running):
            return []
        return list(running)

    def prepare_extend(self, reqs: list[Req], decoding: list[Req] = ()) -> ScheduleBatch:
        prefix_lens: list[int] = []
        for req in reqs:
            if req.req_pool_idx is None:
                self._start_req(req)
                prefix_lens.append(int(req.prefix_indices.numel()))
            else:
                prefix_lens.append(req.kv_committed_len)  # a continuing chunked prefill
        for req in decoding:
            req.extend_input_len = 1
            prefix_lens.append(req.kv_committed_len)
        reqs = list(reqs) + list(decoding)
        extend_lens = [r.extend_input_len for r in reqs]
        slots = self.kv.alloc_slots(sum(extend_lens))
        if slots is None:  # the adder checked memory, so this is a bug, not pressure
            raise RuntimeError(f"prefill of {sum(extend_lens)} tokens admitted but slots ran out "
                               f"({self.kv.allocator.available_size()} free)")
        offset = 0
        for req, prefix_len, extend_len in zip(reqs, prefix_lens, extend_lens):
            self.kv.write_slots(req, prefix_len, slots[offset:offset + extend_len])
            req.kv_committed_len = prefix_len + extend_len
            req.is_chunked = int(req is self.chunked_req) if req not in decoding else 0
            offset += extend_len
        mode = ForwardMode.MIXED if decoding else ForwardMode.EXTEND
        if decoding:  # running rows advance in this batch too; a plain extend leaves them as they are
            self.decode_batch.invalidate()
        batch = ScheduleBatch(reqs, mode, prefix_lens, extend_lens, slots, decoding_reqs=list(decoding))
        batch.forward_batch = build_extend(batch, self.vocab_size, self.device)
        self.s.stats.num_prefill_batches += 1
        return batch

    def _start_req(self, req: Req) -> None:
        row = self.kv.alloc_row()
        if row is None:
            raise RuntimeError("admitted a request without a free request row")
        req.req_pool_idx = row
        self.kv.readmit(req)
        self.kv.write_prefix(req)
        cached = int(req.prefix_indices.numel())
        req.cached_tokens += cached
        self.s.stats.cached_tokens += cached
        self.s.stats.prompt_tokens += len(req.fill_ids)
        if req.num_retractions:
            self.s.stats.resumed_cached_tokens += cached
            logger.info("resume %s after retraction: %d of %d tokens cached", req.rid, cached, len(req.fill_ids))

    # ---- decode ------------------------------------------------------------------------------
    def get_decode_batch(self, reqs: Optional[list[Req]] = None,
                         step_offsets: Optional[list[int]] = None) -> Optional[ScheduleBatch]:
        """Decode `reqs` (default: all running). The overlap loop passes the subset that will still
        run and, per request, how many sampled tokens it has not seen yet (`step_offsets`)."""
        s = self.s
        if reqs is None:
            if self.kv.available_tokens() < len(s.running):
                self.retract_decode(len(s.running))
            reqs = list(s.running)
        if not reqs:
            return None
        slots = self.kv.alloc_slots(len(reqs))
        if slots is None:
            raise RuntimeError(f"decode of {len(reqs)} requests could not get slots after retraction")
        batch = ScheduleBatch(reqs, ForwardMode.DECODE, out_cache_loc=slots)
        batch.forward_batch = fb = self.decode_batch.build(batch, step_offsets)
        self.kv.write_decode_slots(fb.req_pool_indices, fb.positions, slots)
        for req in reqs:
            req.kv_committed_len += 1
        self.new_token_ratio = max(self.min_new_token_ratio, self.new_token_ratio - self.new_token_ratio_decay)
        s.stats.num_decode_batches += 1
        return batch

    def retract_decode(self, need: int) -> None:
        """Move running requests (most remaining work first) back to the queue until the rest can
        decode RETRACT_DECODE_STEPS steps; a lone request that cannot take one step is aborted."""
        s = self.s
        order = sorted(s.running, key=lambda r: (r.remaining_new_tokens(), len(r.origin_input_ids)))
        retracted: list[Req] = []
        while order and self.kv.available_tokens() < len(order) * (RETRACT_DECODE_STEPS if len(order) > 1 else 1):
            if len(order) == 1:
                req = order.pop()
                req.finished_reason = {"type": "abort", "message": "out of KV cache memory"}
                self.kv.release_req(req)
                s.output.send([req])
                s.running = [r for r in s.running if r is not req]
                continue
            req = order.pop()
            self._retract(req)
            retracted.append(req)
        s.running = [r for r in s.running if all(r is not x for x in retracted)]
        s.waiting_queue = retracted + s.waiting_queue
        self.new_token_ratio = self.init_new_token_ratio
        s.stats.num_retractions += len(retracted)

    def _retract(self, req: Req) -> None:
        released = req.kv_committed_len
        kept = self.kv.retract_req(req)
        req.num_retractions += 1
        self.s.stats.retracted_tokens_released += released
        self.s.stats.retracted_tokens_kept += kept
        logger.info("retract %s: released %d tokens, %d kept in the prefix tree (output so far %d)",
                    req.rid, released, kept, len(req.output_ids))
