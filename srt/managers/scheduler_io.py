"""The scheduler's sockets. Only rank 0 owns them; it broadcasts what it received so every
tensor-parallel rank processes the same ordered inputs, and only rank 0 sends outputs.

Each loop iteration rank 0 drains its socket without blocking (or waits up to
`IDLE_POLL_MS` when the scheduler is idle) and broadcasts the ordered list over the CPU
group; an empty step costs one 8-byte broadcast. Stopping is an input too: on SIGTERM,
rank 0 appends `StopRanks` to the list, so every rank (on every node) leaves its loop
at the same step and exits 0 instead of failing on a vanished peer.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

import zmq

from radixlm.distributed import broadcast_pyobj
from radixlm.managers import hop_trace

IDLE_POLL_MS = 1000


@dataclass
class StopRanks:
    """Rank 0 is shutting down (SIGTERM): every rank leaves its event loop at this step."""

    reason: str = "SIGTERM"


class SchedulerStopped(Exception):
    """Raised out of `recv_requests` on every rank when `StopRanks` arrives (a clean exit)."""


class SchedulerIO:
    def __init__(self, port_args: Any, tp_rank: int) -> None:
        self.tp_rank = tp_rank
        self.stop_requested = False
        self.context = zmq.Context(2) if tp_rank == 0 else None
        if self.context is not None:
            self.recv_from_tokenizer = self.context.socket(zmq.PULL)
            self.recv_from_tokenizer.bind(port_args.scheduler_input_ipc)
            self.send_to_detokenizer_sock = self.context.socket(zmq.PUSH)
            self.send_to_detokenizer_sock.connect(port_args.detokenizer_ipc)
            self.send_to_tokenizer_sock = self.context.socket(zmq.PUSH)
            self.send_to_tokenizer_sock.connect(port_args.tokenizer_ipc)

    def install_stop_handler(self) -> None:
        """SIGTERM only sets a flag: rank 0 broadcasts the stop; other ranks wait for it (their
        launcher kills them after a grace period if rank 0 is gone)."""
        def on_sigterm(*_: Any) -> None:
            self.stop_requested = True

        signal.signal(signal.SIGTERM, on_sigterm)

    def recv_requests(self, block: bool = False) -> list[Any]:
        msgs: list[Any] = []
        if self.tp_rank == 0:
            if block and not self.stop_requested:
                self.recv_from_tokenizer.poll(IDLE_POLL_MS)
            while True:
                try:
                    msgs.append(self.recv_from_tokenizer.recv_pyobj(zmq.NOBLOCK))
                except zmq.Again:
                    break
            if self.stop_requested:
                msgs.append(StopRanks())
        msgs = broadcast_pyobj(msgs, src=0) or []
        if msgs:
            hop_trace.mark("sched_recv")
        if msgs and isinstance(msgs[-1], StopRanks):
            raise SchedulerStopped(msgs[-1].reason)
        return msgs

    def has_input(self) -> bool:
        """Rank 0: a message is waiting on the socket (not received, not broadcast); False elsewhere."""
        return self.tp_rank == 0 and bool(self.recv_from_tokenizer.poll(0))

    def send_to_detokenizer(self, msg: Any) -> None:
        if self.tp_rank == 0:
            hop_trace.mark("sched_sent")  # before the send (hop_trace docstring)
            self.send_to_detokenizer_sock.send_pyobj(msg)

    def send_to_tokenizer(self, msg: Any) -> None:
        if self.tp_rank == 0:
            self.send_to_tokenizer_sock.send_pyobj(msg)
