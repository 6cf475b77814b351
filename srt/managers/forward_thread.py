"""The overlap loop's forward thread: runs `ModelRunner.forward` for each submitted batch, in order.

Launches return as soon as the work is queued on the device, so the scheduler thread plans the
next batch and processes the previous one's results meanwhile. On CUDA the forwards run on
streams of their own (the scheduler thread's small host-to-device copies on its stream never wait
for a batch in flight): decodes on one, extends (prefills) on a second stream of the highest
priority. A prefill launched beside an in-flight decode (`OverlapLoop`) therefore gets the GPU's
free SMs first instead of queueing behind the decode; the decode's remaining kernels run in the gaps.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, Optional

import torch

from radixlm.managers.step_trace import GpuSpan

PREFILL_STREAM_PRIORITY = -100  # clamped by torch to the device's highest priority


class ForwardThread:
    """Runs forwards in submission order; placeholders are resolved from the previous output."""

    def __init__(self, forward: Callable[[Any], Any], device: Optional[torch.device] = None) -> None:
        self.forward = forward
        self.jobs: queue.Queue = queue.Queue()
        self.device = device if device is not None and device.type == "cuda" else None
        self.stream = self.prefill_stream = None
        if self.device is not None:
            self.stream = torch.cuda.Stream(self.device)
            self.prefill_stream = torch.cuda.Stream(self.device, priority=PREFILL_STREAM_PRIORITY)
        self.thread = threading.Thread(target=self._run, name="forward-thread", daemon=True)
        self.thread.start()

    def submit(self, forward_batch: Any, resolve: Optional[tuple[Future, Any, Any]],
               span: Optional[GpuSpan] = None) -> Future:
        """`resolve` = (previous batch's future, dst rows, src rows): index tensors, or slices for all rows;
        `span`: events to record around the forward (the step trace)."""
        fut: Future = Future()
        ready = stream = None
        if self.device is not None:  # the batch's inputs were made on the scheduler's stream
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self.device))
            stream = self.stream if forward_batch.forward_mode.is_decode() else self.prefill_stream
        self.jobs.put((forward_batch, resolve, fut, ready, span, stream))
        return fut

    def _run(self) -> None:
        if self.device is not None:
            torch.cuda.set_device(self.device)
        while True:
            forward_batch, resolve, fut, ready, span, stream = self.jobs.get()
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                self._forward(forward_batch, resolve, fut, ready, span, stream)

    def _forward(self, forward_batch: Any, resolve: Optional[tuple[Future, Any, Any]], fut: Future,
                 ready: Any, span: Optional[GpuSpan], stream: Any) -> None:
        if ready is not None:
            stream.wait_event(ready)
        if span is not None:
            span.start.record()
        try:
            if resolve is not None:
                prev_future, dst, src = resolve
                prev_ids = prev_future.result().forward_output.next_token_ids
                forward_batch.input_ids[dst] = prev_ids[src].to(forward_batch.input_ids.dtype)
            out = self.forward(forward_batch)
            if span is not None:
                span.end.record()
            fut.set_result(out)
        except BaseException as e:  # noqa: BLE001 - re-raised on the scheduler thread
            fut.set_exception(e)
