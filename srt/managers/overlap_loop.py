"""The overlap event loop: launch decode batch N+1 before processing the results of batch N.

A forward thread (`ForwardThread`) runs `ModelRunner.forward` in launch order, so the CPU work of
batch N (appending tokens, finish checks, detokenizer messages, cache inserts) happens while
batch N+1 computes. Batch N+1's input ids for requests still waiting on batch N's token
are placeholders `(row in N)`, resolved on the forward thread from N's output tensor.
KV releases made while N+1 is in flight are deferred (`KVCacheManager.deferred_frees`)
until N+1 is done, since it still reads those rows and slots.

The lag is used only between decode batches with no memory pressure, and with nothing
waiting or a waiting queue that failed admission at the last drained step (re-tried as soon
as a request arrives, finishes, aborts or is retracted, and every ADMISSION_RETRY_STEPS
steps); any other step (prefill, chunk, retraction, abort, control) first drains the
in-flight batch, so the plain loop's logic applies to it unchanged.

Prefill beside decode: when requests arrive while a decode is in flight, their prefill is
launched at once beside it (on CUDA on the forward thread's high-priority stream, so it does not
queue behind the decode steps already launched) and processed, and the decode keeps its place.
A prefill touches only its own request rows and new slots; the one thing it can overwrite that
the decode reads is a slot it evicted from the prefix cache, which only rows of requests already
finished (whose tokens are dropped) still attend. With one tensor-parallel rank on CUDA the
scheduler also watches its socket while it waits for a decode, so a prefill starts within a poll
of the request's arrival rather than at the next step. Off with RADIXLM_PREFILL_BESIDE_DECODE=0,
with --enable-mixed-chunk, and on CUDA with tensor parallelism (two streams' collectives on one
communicator could deadlock).

Decode pacing (`DecodePacer`; opt-in, RADIXLM_DECODE_PACING=auto where the loop watches for arrivals):
the next decode is built and launched only shortly before the one in flight is expected to end, not a
whole step ahead, and the socket is watched until then, so a prefill that arrives meanwhile shares the
device with the rest of one decode step instead of that and a whole queued step.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

import torch

from radixlm import environ
from radixlm.managers import hop_trace
from radixlm.managers.decode_pacer import DecodePacer
from radixlm.managers.forward_thread import ForwardThread
from radixlm.managers.schedule_batch import Req, ScheduleBatch
from radixlm.managers.step_trace import GpuSpan, open_step_trace
from radixlm.model_executor.forward_batch import ForwardMode

if TYPE_CHECKING:
    from radixlm.managers.scheduler import Scheduler


ADMISSION_RETRY_STEPS = 8  # while the waiting queue is blocked, drain and retry admission this often
ARRIVAL_POLL_S = 1e-4  # while waiting for a decode (one rank, CUDA): how often the socket is checked


@dataclass
class InFlight:
    batch: ScheduleBatch
    future: Future
    deferred: list[Callable[[], None]] = field(default_factory=list)  # releases to run once it is done
    build_s: float = 0.0  # host time spent planning it (the step trace's)
    span: Optional[GpuSpan] = None  # device events around its forward (step trace on CUDA)
    waited_s: float = 0.0  # host time already spent waiting for it while watching for arrivals
    launched_at: float = 0.0  # host time it was submitted
    done_at: Optional[float] = None  # host time its device work was seen done (watched waits only)


class OverlapLoop:
    def __init__(self, scheduler: "Scheduler") -> None:
        self.s = scheduler
        self.beside = _prefill_beside_enabled(scheduler)
        self.worker = ForwardThread(scheduler.run_batch_from_forward_batch, scheduler.model_runner.device)
        self.in_flight: Optional[InFlight] = None
        self.pending: dict[int, int] = {}  # id(req) -> its row in the in-flight decode batch
        self.lag_checked: list[Req] = []  # running requests last found free of grammar and penalty rows
        self.blocked_at: Optional[tuple[int, ...]] = None  # _admission_signature() when admission last failed
        self.lagged_steps = 0
        self.trace = open_step_trace(environ.step_trace_path(), scheduler.model_runner.device)
        self.watch_arrivals = self.beside and self.worker.device is not None and scheduler.server_args.tp_size == 1
        self.pacer = _pacer(self.beside and scheduler.server_args.tp_size == 1, self.watch_arrivals)
        self.paced_launch = False  # the decode launched last had a pacing deadline
        self.lag_frees = self.beside and environ.lag_for_frees()
        self.freed_retry_at: Optional[tuple[int, ...]] = None  # _admission_signature() of the last _lag_for_frees

    def run(self) -> None:
        s = self.s
        while True:
            s.process_input_requests(s.io.recv_requests(block=s.is_idle()))
            if self.in_flight is not None and not self._can_lag():
                if self._prefill_beside():
                    continue  # the decode in flight keeps its place; the next step decides again
                if not self._lag_for_frees():
                    self.drain()
            elif self.in_flight is not None and self._hold_for_arrival():
                continue  # a message came before the next decode's launch: the next step sees it first
            tried_admission = self.in_flight is None
            t0 = time.perf_counter()
            batch, resolve = self._next_batch()
            self._note_admission(tried_admission, batch)
            launched = None
            if batch is not None:
                s.idle_checked = False
                s.tp_guard.check(batch)  # before launch: every rank about to run the same batch
                span = self.trace.span() if self.trace is not None else None
                launched = InFlight(batch, self.worker.submit(batch.forward_batch, resolve, span),
                                    build_s=time.perf_counter() - t0, span=span, launched_at=time.perf_counter())
                hop_trace.mark("launched")
                if self.in_flight is not None:
                    s.stats.overlapped_steps += 1
                    s.stats.overlapped_steps_with_queue += bool(s.waiting_queue)
            if self.in_flight is not None:
                if self.watch_arrivals and self._arrival_before_done(self.in_flight):
                    s.process_input_requests(s.io.recv_requests())
                    self._prefill_beside(newest=launched)
                elif self.pacer is not None and not self.watch_arrivals and self.in_flight.done_at is None:
                    self.in_flight.future.result()  # pacing forced on off CUDA (tests): done with its forward
                    self.in_flight.done_at = time.perf_counter()
                self._process(self.in_flight, keep_deferred_for=launched)
                self._note_paced(self.in_flight)
            self.in_flight = launched
            self.pending = {id(r): i for i, r in enumerate(batch.reqs)} if batch is not None and \
                batch.forward_mode == ForwardMode.DECODE else {}
            if batch is None and self.in_flight is None:
                s.on_idle()

    def _can_lag(self) -> bool:
        s = self.s
        if not self._decode_in_flight():
            return False
        if s.waiting_queue and not self._admission_blocked():
            return False
        return self._lag_safe()

    def _lag_safe(self) -> bool:
        """Another decode may launch before the one in flight is processed: no abort to resolve, no row
        whose sampling needs the in-flight token, and slots for two more steps."""
        # A constrained row's mask for batch N+1 needs batch N's token accepted by its matcher,
        # so batches with a grammar resolve the in-flight batch first (they lose the overlap;
        # unconstrained batches keep it). Cost: benchmark/RESULTS.md, "constrained decoding".
        if self.s.planner.abort_pending or self._rows_need_current_tokens():
            return False
        return self._kv_room()

    def _decode_in_flight(self) -> bool:
        """A decode is in flight and no chunked prefill waits to continue."""
        flight = self.in_flight
        return (flight is not None and flight.batch.forward_mode == ForwardMode.DECODE
                and self.s.planner.chunked_req is None)

    def _kv_room(self) -> bool:
        """Slots for two more decode steps of every running request (no memory pressure)."""
        return self.s.kv.available_tokens() >= 2 * len(self.s.running)

    def _beside_ok(self) -> bool:
        """A prefill may launch beside the in-flight decode: requests wait and admission is worth a
        try (not known to be blocked, no memory pressure, no chunked prefill or abort to resolve first)."""
        s = self.s
        return (self.beside and self._decode_in_flight() and bool(s.waiting_queue) and not s.planner.abort_pending
                and self.blocked_at != self._admission_signature() and self._kv_room())

    def _prefill_beside(self, newest: Optional[InFlight] = None) -> bool:
        """Launch a prefill of the waiting queue beside the decode(s) in flight and process it (its
        first tokens go out); True if one ran. Its releases wait for `newest`, the latest decode."""
        if not self._beside_ok():
            return False
        s = self.s
        t0 = time.perf_counter()
        batch = s.planner.get_new_batch_prefill()
        if batch is None:
            return False  # admission failed: the caller drains and tries again as usual
        s.idle_checked = False
        s.tp_guard.check(batch)
        span = self.trace.span() if self.trace is not None else None
        flight = InFlight(batch, self.worker.submit(batch.forward_batch, None, span),
                          build_s=time.perf_counter() - t0, span=span)
        hop_trace.mark("launched")
        s.stats.prefills_beside_decode += 1
        if self.pacer is not None:
            self.pacer.reset()  # the decode in flight shares the device with the prefill: its end says nothing
        self._process(flight, keep_deferred_for=newest or self.in_flight)
        return True

    def _lag_for_frees(self) -> bool:
        """A prefill beside the decode failed while releases wait on the decode in flight (requests that
        finished in the batch before it, whose rows it still reads): lag one more decode instead of
        draining, so those releases land before the next try and its prefill runs beside a decode rather
        than on an idle device after the drain. Once per admission signature: a second failure drains.
        Off with RADIXLM_LAG_FOR_FREES=0."""
        signature = self._admission_signature()
        if not (self.lag_frees and self.in_flight.deferred and self.freed_retry_at != signature and self._lag_safe()):
            return False
        self.freed_retry_at = signature
        self.s.stats.lagged_for_frees += 1
        return True

    def _arrival_before_done(self, flight: InFlight) -> bool:
        """Wait for a decode's device work, returning True as soon as a message arrives first (only
        with one rank: no other rank has to agree on when it was seen)."""
        if flight.batch.forward_mode != ForwardMode.DECODE:
            return False
        t0 = time.perf_counter()
        event = flight.future.result().host_copy_event
        try:
            if event is not None and event.query() and flight.done_at is None:  # its end was not seen
                if self.paced_launch:
                    self._missed()  # and the next decode, paced, was launched after it: too late
                return False
            while event is not None and not event.query():
                if self.s.io.has_input():
                    return True
                time.sleep(ARRIVAL_POLL_S)
            if flight.done_at is None:
                flight.done_at = time.perf_counter()
            return False
        finally:
            flight.waited_s += time.perf_counter() - t0

    def _hold_for_arrival(self) -> bool:
        """Decode pacing: before building the next decode, wait until its launch time (`DecodePacer`)
        watching the socket; True if a message came first. Stops early if the decode in flight is done."""
        deadline = self.pacer.deadline() if self.pacer is not None else None
        self.paced_launch = deadline is not None
        if deadline is None or time.perf_counter() >= deadline:
            return False
        flight, st = self.in_flight, self.s.stats
        t0 = time.perf_counter()
        st.paced_holds += 1
        try:
            while time.perf_counter() < deadline:
                if self.s.io.has_input():
                    st.paced_arrivals += 1
                    return True
                if _is_done(flight):  # ended before the deadline: the next launch is late
                    flight.done_at = time.perf_counter()
                    self._missed()
                    return False
                time.sleep(ARRIVAL_POLL_S)
            return False
        finally:
            st.paced_hold_s += time.perf_counter() - t0

    def _note_paced(self, flight: InFlight) -> None:
        """A lagged decode's results are processed: its times go to the pacer."""
        if self.pacer is not None:
            self.pacer.step_done(flight.launched_at, flight.done_at, flight.build_s)

    def _missed(self) -> None:
        self.pacer.missed()
        self.s.stats.paced_late_launches += 1

    def _admission_signature(self) -> tuple[int, ...]:
        """Counters that move when admission could newly succeed: arrivals, finishes (slots and
        request rows freed), aborts and retractions."""
        st = self.s.stats
        return st.num_requests, st.num_finished, st.num_aborted, st.num_retractions

    def _admission_blocked(self) -> bool:
        """The waiting queue could not be admitted at the last step that tried (a drained one), and
        nothing that frees memory or adds requests has happened since: decode keeps the overlap
        instead of draining every step to fail again. As the new-token ratio decays the reserve
        shrinks, so admission is still retried every ADMISSION_RETRY_STEPS steps. Decided from the
        scheduler's own counters, so every tensor-parallel rank decides the same."""
        if self.blocked_at != self._admission_signature():
            return False
        self.lagged_steps += 1
        return self.lagged_steps % ADMISSION_RETRY_STEPS != 0

    def _note_admission(self, tried: bool, batch: Optional[ScheduleBatch]) -> None:
        """After a step that tried the waiting queue: remember a failed admission (a decode ran instead)."""
        if not tried:
            return
        failed = batch is not None and batch.forward_mode == ForwardMode.DECODE and bool(self.s.waiting_queue)
        self.blocked_at = self._admission_signature() if failed else None
        self.lagged_steps = 0

    def _rows_need_current_tokens(self) -> bool:
        """Grammar or penalty rows (their sampling state needs every token so far); scanned once per
        set of running requests, which changes far less often than every step."""
        running = self.s.running
        if running == self.lag_checked:
            return False
        if any(r.grammar is not None or _uses_penalties(r) for r in running):
            return True
        self.lag_checked = list(running)  # a copy: `running` is extended in place
        return False

    def _next_batch(self) -> tuple[Optional[ScheduleBatch], Optional[tuple]]:
        if self.in_flight is None:
            return self.s.get_next_batch_to_run(), None
        pending = self.pending
        # still running once the in-flight token lands (length); stop-token finishes cost one extra step
        reqs = [r for r in self.s.running
                if len(r.output_ids) + (id(r) in pending) < r.sampling_params.max_new_tokens]
        if not reqs:
            return None, None
        flight_reqs = self.in_flight.batch.reqs
        if reqs == flight_reqs:  # the steady case: every row waits on its own row of the batch in flight
            batch = self.s.planner.get_decode_batch(reqs, step_offsets=[1] * len(reqs))
            return batch, (self.in_flight.future, slice(None), slice(None))
        batch = self.s.planner.get_decode_batch(reqs, step_offsets=[int(id(r) in pending) for r in reqs])
        dst = [i for i, r in enumerate(reqs) if id(r) in pending]
        src = [pending[id(reqs[i])] for i in dst]
        device = batch.forward_batch.input_ids.device
        resolve = (self.in_flight.future, torch.tensor(dst, dtype=torch.int64, device=device),
                   torch.tensor(src, dtype=torch.int64, device=device)) if dst else None
        return batch, resolve

    def _process(self, flight: InFlight, keep_deferred_for: Optional[InFlight]) -> None:
        t0 = time.perf_counter()
        result = flight.future.result()
        if result.host_copy_event is not None and self.trace is not None:
            result.host_copy_event.synchronize()  # so the trace's wait covers the device, not the processing
        hop_trace.mark("result")
        t1 = time.perf_counter()
        for release in flight.deferred:
            release()
        if keep_deferred_for is None:
            self.s.process_batch_result(flight.batch, result)
        else:
            with self.s.kv.deferred_frees() as deferred:
                self.s.process_batch_result(flight.batch, result)
            keep_deferred_for.deferred.extend(deferred)
        if self.trace is not None:
            fb = flight.batch.forward_batch
            self.trace.record(flight.batch.forward_mode.name.lower(), fb.batch_size, int(fb.input_ids.shape[0]),
                              flight.build_s, t1 - t0 + flight.waited_s, time.perf_counter() - t1, flight.span)

    def drain(self) -> None:
        flight, self.in_flight = self.in_flight, None
        self.pending = {}
        if self.pacer is not None:
            self.pacer.reset()
        if flight is not None:
            self._process(flight, keep_deferred_for=None)


def _prefill_beside_enabled(scheduler: "Scheduler") -> bool:
    args = scheduler.server_args
    if not environ.prefill_beside_decode() or args.enable_mixed_chunk:
        return False
    return not (scheduler.model_runner.device.type == "cuda" and args.tp_size > 1)


def _pacer(beside_one_rank: bool, watch_arrivals: bool) -> Optional[DecodePacer]:
    """A DecodePacer where pacing is on (off unless asked): with "auto" where the loop watches for
    arrivals; forced on by a margin in RADIXLM_DECODE_PACING. Either way it needs prefills beside decodes
    and one rank (its holds follow host clocks and the socket, which ranks would not see alike)."""
    mode, margin_s = environ.decode_pacing()
    on = mode == "on" or (mode == "auto" and watch_arrivals)
    return DecodePacer(margin_s) if on and beside_one_rank else None


def _is_done(flight: InFlight) -> bool:
    """The flight's device work is done (without waiting)."""
    if not flight.future.done():
        return False
    event = flight.future.result().host_copy_event
    return event is None or event.query()


def _uses_penalties(req: Req) -> bool:
    p = req.sampling_params  # output-token counts would miss the in-flight token
    return bool(p.frequency_penalty or p.presence_penalty or p.repetition_penalty != 1.0)
