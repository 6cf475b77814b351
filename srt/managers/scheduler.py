"""Scheduler: continuous batching over one ModelRunner (one process per tensor-parallel rank).

    loop:
        process_input_requests(recv_requests())
        batch = get_next_batch_to_run()      # prefill (chunked) or decode
        result = run_batch(batch)            # launch the forward
        process_batch_result(batch, result)  # finish / stream / cache (SchedulerOutput)

Composed of small parts: `SchedulerIO` (sockets, rank 0 only; inputs broadcast to all
ranks), `KVCacheManager` (rows, slots, prefix cache), `PrefillAdder` + policies
(admission), `BatchPlanner` (prefill and decode batches, retraction) and
`SchedulerOutput` (results -> detokenizer) and `GrammarManager` (constrained requests wait
in its queue until their grammar is compiled). Every rank runs the same code over the same
ordered inputs, so all ranks reach the same batches on their own.

A decode step of unchanged requests costs a few tensor ops plus one append per request:
`PersistentDecodeBatch` advances the previous decode batch's tensors instead of rebuilding
them, and `SteadyDecode` skips the per-request finish checks when no token can finish one.
"""

from __future__ import annotations

import dataclasses

import logging
import os
import random
import socket
import time
from dataclasses import dataclass
from typing import Any, Optional

from radixlm.distributed import all_gather_pyobj
from radixlm.managers.batch_planner import BatchPlanner
from radixlm.managers.io_struct import (AbortReq, FlushCacheReq, FlushCacheReqOutput, GetServerInfoReq,
                                        GetServerInfoReqOutput, HealthCheckOutput, HealthCheckReq,
                                        TokenizedGenerateReqInput)
from radixlm.managers.grammar_manager import GrammarManager
from radixlm.managers.kv_cache_manager import KVCacheManager
from radixlm.managers.schedule_batch import Req, ScheduleBatch
from radixlm.managers.scheduler_io import SchedulerIO, SchedulerStopped
from radixlm.managers.scheduler_output import SchedulerOutput
from radixlm.managers.scheduler_stats import SchedulerStats
from radixlm.managers.tp_consistency import TPConsistencyGuard
from radixlm.model_executor.forward_output import ForwardOutput, finish_host_copy, start_host_copy

logger = logging.getLogger(__name__)


def create_prefix_cache(server_args: Any, model_runner: Any) -> Any:
    kwargs = dict(req_to_token_pool=model_runner.req_to_token_pool,
                  token_to_kv_pool_allocator=model_runner.token_to_kv_pool_allocator)
    if server_args.disable_radix_cache:
        from radixlm.mem_cache.chunk_cache import ChunkCache

        return ChunkCache(**kwargs)
    from radixlm.mem_cache.radix_cache import RadixCache

    return RadixCache(**kwargs)


def share_cpu_threads(server_args: Any) -> None:
    """CPU tensor parallelism: the node's ranks split its cores instead of each taking all of them."""
    if server_args.device == "cpu" and server_args.tp_size_per_node > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // server_args.tp_size_per_node))


@dataclass
class GenerationBatchResult:
    forward_output: ForwardOutput
    forward_time_s: float = 0.0
    host_copy_event: Any = None  # CUDA: set when the output's host copy is done (see start_host_copy)


class Scheduler:
    def __init__(self, server_args: Any, port_args: Any, tp_rank: int = 0) -> None:
        from radixlm.model_executor.model_runner import ModelRunner
        from radixlm.model_loader.tokenizer import get_tokenizer

        self.server_args = server_args
        self.tp_rank = tp_rank
        share_cpu_threads(server_args)
        self.model_runner = ModelRunner(server_args, tp_rank=tp_rank, tp_size=server_args.tp_size,
                                        gpu_id=tp_rank % server_args.tp_size_per_node)
        self.model_config = self.model_runner.model_config
        self.max_running_requests = self.model_runner.max_running_requests
        self.tree_cache = create_prefix_cache(server_args, self.model_runner)
        self.kv = KVCacheManager(self.model_runner.req_to_token_pool,
                                 self.model_runner.token_to_kv_pool_allocator, self.tree_cache)
        self.tokenizer = get_tokenizer(server_args.tokenizer_path or server_args.model_path,
                                       trust_remote_code=server_args.trust_remote_code)
        self.rng = random.Random(server_args.random_seed)
        self.waiting_queue: list[Req] = []
        self.running: list[Req] = []
        self.stats = SchedulerStats()
        self.planner = BatchPlanner(self)
        self.output = SchedulerOutput(self)
        self.grammars = GrammarManager(server_args, self.tokenizer, self.model_config, self.output.eos_ids)
        self.io = SchedulerIO(port_args, tp_rank)
        self.tp_guard = TPConsistencyGuard(server_args)
        self.idle_checked = False
        self.overlap: Any = None  # the OverlapLoop, when it runs

    # ---- process lifecycle -----------------------------------------------------------------
    def ready_info(self) -> dict:
        """Called once every rank is built; the all-gather makes readiness cover all ranks (on all nodes)."""
        ranks = all_gather_pyobj({"tp_rank": self.tp_rank, "pid": os.getpid(), "host": socket.gethostname(),
                                  "max_total_num_tokens": self.kv.total_tokens}, startup=True)
        return {"max_total_num_tokens": self.kv.total_tokens, "max_running_requests": self.max_running_requests,
                "context_len": self.model_config.context_len, "vocab_size": self.model_config.vocab_size,
                "tp_ranks": ranks}

    def event_loop(self) -> None:
        self.io.install_stop_handler()
        try:
            if self.server_args.disable_overlap_schedule:
                self.event_loop_normal()
            else:
                self.event_loop_overlap()
        except SchedulerStopped:
            logger.info("scheduler rank %d stopping (rank 0 was asked to)", self.tp_rank)
            logging.shutdown()
            os._exit(0)  # skip interpreter teardown (process groups, threads): seconds on a loaded host

    def event_loop_overlap(self) -> None:
        from radixlm.managers.overlap_loop import OverlapLoop

        self.overlap = OverlapLoop(self)
        self.overlap.run()

    def event_loop_normal(self) -> None:
        while True:
            self.process_input_requests(self.io.recv_requests(block=self.is_idle()))
            batch = self.get_next_batch_to_run()
            if batch is None:
                self.on_idle()
                continue
            self.tp_guard.check(batch)
            self.idle_checked = False
            result = self.run_batch(batch)
            self.process_batch_result(batch, result)

    # ---- inputs ------------------------------------------------------------------------------
    def process_input_requests(self, msgs: list[Any]) -> None:
        for msg in msgs:
            if isinstance(msg, TokenizedGenerateReqInput):
                self.handle_generate_request(msg)
            elif isinstance(msg, AbortReq):
                self.abort_request(msg)
            elif isinstance(msg, FlushCacheReq):
                self.io.send_to_tokenizer(FlushCacheReqOutput(success=self.flush_cache()))
            elif isinstance(msg, GetServerInfoReq):
                self.io.send_to_tokenizer(GetServerInfoReqOutput(stats=self.get_stats()))
            elif isinstance(msg, HealthCheckReq):
                self.io.send_to_tokenizer(HealthCheckOutput(token=msg.token))
            else:
                logger.warning("scheduler: unexpected message %s", type(msg).__name__)
        self.poll_grammar_queue()

    def handle_generate_request(self, msg: TokenizedGenerateReqInput) -> None:
        params = msg.sampling_params
        seed = params.seed if params.seed is not None else self.rng.getrandbits(62)
        req = Req(msg.rid, msg.input_ids, params, seed, stream=msg.stream, return_logprob=msg.return_logprob,
                  logprob_start_len=msg.logprob_start_len, top_logprobs_num=msg.top_logprobs_num,
                  extra_key=msg.cache_salt, require_reasoning=msg.require_reasoning)
        error = self.admission_error(req)
        if error is not None:
            req.finished_reason = {"type": "abort", "message": error}
            self.output.send([req])
            return
        self.stats.num_requests += 1
        if self.grammars.add(req):  # constrained: waits for its grammar (or failed at once)
            if req.finished():
                self.output.send([req])
            return
        self.waiting_queue.append(req)

    def poll_grammar_queue(self) -> None:
        """Compiled requests join the waiting queue; failed ones finish with a 400 abort."""
        ready, failed = self.grammars.poll(idle=self.is_idle(include_grammar_queue=False))
        self.waiting_queue.extend(ready)
        self.output.send(failed)

    def admission_error(self, req: Req) -> Optional[str]:
        prompt_len = len(req.origin_input_ids)
        total = prompt_len + req.sampling_params.max_new_tokens
        if prompt_len == 0:
            return "the prompt is empty (input_ids)"
        if total > self.model_config.context_len:
            return (f"prompt ({prompt_len} tokens) + max_new_tokens ({req.sampling_params.max_new_tokens}) "
                    f"exceeds the context length {self.model_config.context_len}")
        if total >= self.kv.total_tokens:
            return (f"prompt ({prompt_len} tokens) + max_new_tokens ({req.sampling_params.max_new_tokens}) "
                    f"does not fit the KV cache ({self.kv.total_tokens} tokens, --max-total-tokens)")
        return None

    def abort_request(self, msg: AbortReq) -> None:
        message = "aborted by request" if not msg.abort_all else "aborted (abort_all)"
        keep: list[Req] = []
        for req in self.waiting_queue:
            if msg.abort_all or req.rid == msg.rid:
                req.finished_reason = {"type": "abort", "message": message}
                self.kv.release_req(req)  # a waiting request: its lock, or a retraction's pin
                self.output.send([req])
            else:
                keep.append(req)
        self.waiting_queue = keep
        compiling = self.grammars.take(lambda r: msg.abort_all or r.rid == msg.rid)
        for req in compiling:
            req.finished_reason = {"type": "abort", "message": message}
        self.output.send(compiling)
        in_flight = self.overlap.in_flight.batch.reqs if self.overlap and self.overlap.in_flight else []
        chunked = [self.planner.chunked_req] if self.planner.chunked_req else []
        for req in self.running + chunked + in_flight:  # in flight: a prefill not yet joined to running
            if (msg.abort_all or req.rid == msg.rid) and not req.finished():
                req.to_abort = message  # leaves the batch at the next step (see BatchPlanner)
                self.planner.abort_pending = True
                self.output.steady = None  # the decode fast path must not append its token

    def flush_cache(self) -> bool:
        if not self.is_idle():
            return False
        self.tree_cache.reset()
        self.grammars.reset()
        self.kv.req_to_token_pool.clear()
        self.kv.allocator.clear()
        self.stats.reset_cache_counters()
        logger.info("cache flushed")
        return True

    # ---- batches -----------------------------------------------------------------------------
    def is_idle(self, include_grammar_queue: bool = True) -> bool:
        in_flight = self.overlap is not None and self.overlap.in_flight is not None
        compiling = include_grammar_queue and bool(self.grammars.queue)
        return (not self.running and not self.waiting_queue and self.planner.chunked_req is None and not in_flight
                and not compiling)

    def get_next_batch_to_run(self) -> Optional[ScheduleBatch]:
        self.planner.apply_aborts()
        batch = self.planner.get_new_batch_prefill()
        if batch is None and self.running:
            batch = self.planner.get_decode_batch()
        return batch

    def run_batch(self, batch: ScheduleBatch) -> GenerationBatchResult:
        return self.run_batch_from_forward_batch(batch.forward_batch)

    def run_batch_from_forward_batch(self, forward_batch: Any) -> GenerationBatchResult:
        start = time.perf_counter()
        out = self.model_runner.forward(forward_batch)
        return GenerationBatchResult(out, time.perf_counter() - start, start_host_copy(out))

    def process_batch_result(self, batch: ScheduleBatch, result: GenerationBatchResult) -> None:
        # the next decode of the same rows takes these tokens as its input ids, still on the device
        self.planner.decode_batch.note_output(batch.forward_batch, result.forward_output.next_token_ids)
        # a new result object: the forward thread may still read the device tensors (placeholders)
        result = dataclasses.replace(result, forward_output=finish_host_copy(result.forward_output,
                                                                               result.host_copy_event))
        self.output.process(batch, result)

    def on_idle(self) -> None:
        if self.is_idle() and not self.idle_checked:
            self.idle_checked = True
            self.kv.check_idle()

    def get_stats(self) -> dict:
        self.on_idle()  # so a stats request right after the last finish sees the leak check
        stats = self.stats.as_dict()
        stats.update(
            num_running_reqs=len(self.running), num_waiting_reqs=len(self.waiting_queue),
            num_grammar_queue_reqs=len(self.grammars.queue),
            token_usage=round(self.kv.used_tokens() / max(1, self.kv.total_tokens), 4),
            max_total_num_tokens=self.kv.total_tokens, max_running_requests=self.max_running_requests,
            new_token_ratio=round(self.planner.new_token_ratio, 4),
            memory_leak=self.kv.memory_leak, memory_leak_message=self.kv.leak_message,
            available_tokens=self.kv.allocator.available_size(), evictable_tokens=self.tree_cache.evictable_size(),
            memory=self.model_runner.memory_report().as_dict(),
        )
        return stats


def run_scheduler_process(server_args: Any, port_args: Any, tp_rank: int, ready_pipe: Any, parent_pid: int) -> None:
    from radixlm.managers.child_process import run_child

    run_child(f"scheduler-tp{tp_rank}", lambda: Scheduler(server_args, port_args, tp_rank), ready_pipe, parent_pid,
              server_args.log_level)
