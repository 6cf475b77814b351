"""TokenizerManager: the main-process front of the server (asyncio).

It validates and tokenizes requests (`input_processor`), sends them to the scheduler,
holds per-request state, and yields output dicts as the detokenizer's `BatchStrOut`
messages arrive. A receive thread reads the socket and hands messages to the event
loop the manager was first used from (uvicorn's, or the Engine's background loop); the
same thread watches the child processes, so a dead child fails in-flight requests
instead of leaving them hanging. Requests are aborted when the client disconnects or
the consumer stops iterating.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from typing import Any, AsyncIterator, Callable, Optional

import zmq

from radixlm.managers import hop_trace
from radixlm.managers.input_processor import ExpandedRequest, expand_request, first_of_each_prompt, prefill_only
from radixlm.managers.io_struct import (AbortReq, BatchStrOut, FlushCacheReq, FlushCacheReqOutput, GenerateReqInput,
                                        GetServerInfoReq, GetServerInfoReqOutput, HealthCheckOutput, HealthCheckReq,
                                        TokenizedGenerateReqInput)
from radixlm.managers.ports import PortArgs
from radixlm.managers.req_state import ReqState

logger = logging.getLogger(__name__)

WAIT_TIMEOUT_S = 1.0
RECV_POLL_MS = 200


class ServerUnhealthyError(RuntimeError):
    """A child process died: the requests in flight fail with this, and new ones are refused."""


class TokenizerManager:
    def __init__(self, server_args: Any, port_args: PortArgs) -> None:
        from radixlm.model_loader.model_config import ModelConfig
        from radixlm.model_loader.tokenizer import get_tokenizer

        self.server_args = server_args
        self.port_args = port_args
        self.model_config = ModelConfig.from_server_args(server_args)
        self.context_len = self.model_config.context_len
        self.tokenizer = get_tokenizer(server_args.tokenizer_path or server_args.model_path,
                                       trust_remote_code=server_args.trust_remote_code)
        self.served_model_name = server_args.served_model_name
        self.metrics_collector = self._make_metrics() if server_args.enable_metrics else None
        self.rid_to_state: dict[str, ReqState] = {}
        self.dead_reason: Optional[str] = None
        self._failed_all = False
        self.children: Any = None
        self.scheduler_info: dict = {}
        self._ctx = zmq.Context(2)
        self._send = self._ctx.socket(zmq.PUSH)
        self._send.connect(port_args.scheduler_input_ipc)
        self._send_lock = threading.Lock()
        self._recv = self._ctx.socket(zmq.PULL)
        self._recv.bind(port_args.tokenizer_ipc)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._pending_control: dict[type, list[asyncio.Future]] = {}
        self._stopped = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _make_metrics(self) -> Any:
        from radixlm.metrics import TokenizerMetricsCollector

        return TokenizerMetricsCollector({"model_name": self.served_model_name})

    def attach_children(self, children: Any, scheduler_info: dict) -> None:
        self.children = children
        self.scheduler_info = scheduler_info
        self._thread = threading.Thread(target=self._recv_thread, name="tokenizer-manager-recv", daemon=True)
        self._thread.start()

    # ---- receive side (thread -> loop) ----------------------------------------------------
    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("TokenizerManager is used from two event loops")

    def _recv_thread(self) -> None:
        poller = zmq.Poller()
        poller.register(self._recv, zmq.POLLIN)
        while not self._stopped.is_set():
            if poller.poll(RECV_POLL_MS):
                try:
                    msg = self._recv.recv_pyobj(zmq.NOBLOCK)
                except zmq.Again:
                    continue
                hop_trace.mark("tm_recv")
                self._dispatch(self._handle_message, msg)
            elif self.children is not None and not self._failed_all:
                # is_healthy() (/health, watchdogs) may have recorded the death first: fail requests anyway
                reason = self.dead_reason or self.children.dead_reason()
                if reason is not None:
                    logger.error("FATAL: %s; failing all in-flight requests", reason)
                    self.dead_reason = reason
                    self._failed_all = True
                    self._dispatch(self._fail_all, reason)

    def _dispatch(self, fn: Callable, arg: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            if isinstance(arg, BatchStrOut):
                logger.warning("dropping outputs for %s: no event loop yet", arg.rids)
            return
        loop.call_soon_threadsafe(fn, arg)

    def _handle_message(self, msg: Any) -> None:
        if isinstance(msg, BatchStrOut):
            self._handle_batch_str_out(msg)
            return
        waiters = self._pending_control.get(type(msg))
        if waiters:
            fut = waiters.pop(0)
            if not fut.done():
                fut.set_result(msg)
        else:
            logger.warning("unexpected %s from the scheduler", type(msg).__name__)

    def _handle_batch_str_out(self, out: BatchStrOut) -> None:
        hop_trace.mark("tm_loop")
        for i, rid in enumerate(out.rids):
            state = self.rid_to_state.get(rid)
            if state is None:
                continue
            meta = out.metas[i]
            state.add_increment(out.new_texts[i], out.new_output_ids[i], meta, out.logprobs[i])
            if self.metrics_collector is not None:
                state.observe_metrics(self.metrics_collector, meta)

    def _fail_all(self, reason: str) -> None:
        message = f"the server is unhealthy: {reason}"  # one error per waiter: each is raised on its own
        for state in self.rid_to_state.values():
            state.fail(ServerUnhealthyError(message))
        for waiters in self._pending_control.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(ServerUnhealthyError(message))
            waiters.clear()

    # ---- send side ------------------------------------------------------------------------
    def send_to_scheduler(self, msg: Any) -> None:
        with self._send_lock:
            self._send.send_pyobj(msg)

    def _new_state(self, req: TokenizedGenerateReqInput, event: asyncio.Event, text_in_logprobs: bool) -> ReqState:
        if req.rid in self.rid_to_state:
            raise ValueError(f"rid {req.rid!r} is already in use")
        state = ReqState(req, event, self.tokenizer if text_in_logprobs else None)
        self.rid_to_state[req.rid] = state
        return state

    # ---- generate -------------------------------------------------------------------------
    async def generate_request(self, obj: GenerateReqInput, request: Any = None,
                               on_finish: Optional[Callable[[int], None]] = None) -> AsyncIterator[Any]:
        """Yield output dicts (see contracts). `on_finish(index)` is called as each output completes."""
        self._bind_loop()
        self._check_healthy()
        expanded = expand_request(obj, self.tokenizer, self.context_len, self.model_config.vocab_size,
                                  self.server_args.grammar_backend)
        if expanded.n > 1 and not self.server_args.disable_radix_cache:
            await self._shared_prefill(expanded, request)
        event = asyncio.Event()
        states = [self._new_state(r, event, expanded.return_text_in_logprobs) for r in expanded.reqs]
        hop_trace.mark("tm_sent")  # before the sends (hop_trace docstring)
        for state in states:
            self.send_to_scheduler(state.req)
        try:
            if not expanded.is_batch:
                async for _, out in self._wait(states, obj.stream, request, on_finish):
                    yield out
            elif obj.stream:
                async for index, out in self._wait(states, True, request, on_finish):
                    yield {**out, "index": index}
            else:
                results: list[Any] = [None] * len(states)
                async for index, out in self._wait(states, False, request, on_finish):
                    results[index] = out
                yield results
        finally:
            self._release(states)

    async def _shared_prefill(self, expanded: ExpandedRequest, request: Any) -> None:
        """n samples share one prefill: compute each prompt once (max_new_tokens=0) into the cache."""
        event = asyncio.Event()
        states = [self._new_state(prefill_only(r), event, False) for r in first_of_each_prompt(expanded)]
        for state in states:
            self.send_to_scheduler(state.req)
        try:
            async for _ in self._wait(states, False, request, None):
                pass
        finally:
            self._release(states)

    async def _wait(self, states: list[ReqState], stream: bool, request: Any,
                    on_finish: Optional[Callable[[int], None]]) -> AsyncIterator[tuple[int, dict]]:
        pending = set(range(len(states)))
        event = states[0].event
        while pending:
            try:
                await asyncio.wait_for(event.wait(), timeout=WAIT_TIMEOUT_S)
            except asyncio.TimeoutError:
                if request is not None and await request.is_disconnected():
                    self._abort_states(states, "client disconnected")
                continue
            event.clear()
            for i in sorted(pending):
                state = states[i]
                if state.error is not None:
                    raise state.error
                _raise_bad_request(state)
                outs = state.take_outputs(stream)
                for out in outs:
                    yield i, out
                if state.finished:
                    pending.discard(i)
                    if on_finish is not None:
                        on_finish(i)

    def _abort_states(self, states: list[ReqState], why: str) -> None:
        for state in states:
            if not state.finished:
                logger.info("abort %s: %s", state.req.rid, why)
                self.send_to_scheduler(AbortReq(rid=state.req.rid))

    def _release(self, states: list[ReqState]) -> None:
        """On exit of a generator (finished, closed early, cancelled): abort what still runs."""
        if self.dead_reason is None:
            self._abort_states(states, "consumer stopped")
        for state in states:
            self.rid_to_state.pop(state.req.rid, None)

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        if not abort_all and rid not in self.rid_to_state:
            return
        self.send_to_scheduler(AbortReq(rid=rid, abort_all=abort_all))

    # ---- control --------------------------------------------------------------------------
    async def _control(self, msg: Any, reply_type: type) -> Any:
        self._bind_loop()
        self._check_healthy()
        fut = asyncio.get_running_loop().create_future()
        self._pending_control.setdefault(reply_type, []).append(fut)
        self.send_to_scheduler(msg)
        return await fut

    async def flush_cache(self) -> bool:
        out: FlushCacheReqOutput = await self._control(FlushCacheReq(), FlushCacheReqOutput)
        return out.success

    async def get_server_info(self) -> dict:
        out: GetServerInfoReqOutput = await self._control(GetServerInfoReq(), GetServerInfoReqOutput)
        info = dataclasses.asdict(self.server_args)
        info.update(self.scheduler_info)
        info.update(out.stats)
        info.update(healthy=self.is_healthy(), dead_reason=self.dead_reason, num_in_flight=len(self.rid_to_state))
        return info

    async def health_check(self, timeout_s: float = 20.0) -> bool:
        """True when the scheduler answers from its loop within timeout_s."""
        try:
            await asyncio.wait_for(self._control(HealthCheckReq(token=int(time.time())), HealthCheckOutput),
                                   timeout_s)
        except (asyncio.TimeoutError, RuntimeError):
            return False
        return self.is_healthy()

    # ---- status ---------------------------------------------------------------------------
    def is_healthy(self) -> bool:
        if self.dead_reason is None and self.children is not None:
            self.dead_reason = self.children.dead_reason()
        return self.dead_reason is None

    def _check_healthy(self) -> None:
        if not self.is_healthy():
            raise ServerUnhealthyError(f"the server is unhealthy: {self.dead_reason}")

    def num_queued_requests(self) -> int:
        return len(self.rid_to_state)

    def close(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._send.close(linger=0)
        self._recv.close(linger=0)
        self._ctx.term()


def _raise_bad_request(state: ReqState) -> None:
    """A request the scheduler rejected as the client's fault (an abort with status_code 400,
    e.g. an invalid grammar found at compile time) is a ValueError, which HTTP maps to 400."""
    reason = state.meta.finish_reason if state.finished and state.meta is not None else None
    if reason and reason.get("type") == "abort" and reason.get("status_code") == 400:
        raise ValueError(reason.get("message", "bad request"))
