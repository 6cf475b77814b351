"""The scheduler's sockets. Only rank 0 owns them; it broadcasts what it received so every
tensor-parallel rank processes the same ordered inputs."""

from __future__ import annotations

from typing import Any

import zmq

from radixlm.distributed import broadcast_pyobj

IDLE_POLL_MS = 1000


class SchedulerIO:
    def __init__(self, port_args: Any, tp_rank: int) -> None:
        self.tp_rank = tp_rank
        self.context = zmq.Context(2) if tp_rank == 0 else None
        if self.context is not None:
            self.recv_from_tokenizer = self.context.socket(zmq.PULL)
            self.recv_from_tokenizer.bind(port_args.scheduler_input_ipc)
            self.send_to_detokenizer_sock = self.context.socket(zmq.PUSH)
            self.send_to_detokenizer_sock.connect(port_args.detokenizer_ipc)
            self.send_to_tokenizer_sock = self.context.socket(zmq.PUSH)
            self.send_to_tokenizer_sock.connect(port_args.tokenizer_ipc)

    def recv_requests(self, block: bool = False) -> list[Any]:
        msgs: list[Any] = []
        if self.tp_rank == 0:
            if block:
                self.recv_from_tokenizer.poll(IDLE_POLL_MS)
            while True:
                try:
                    msgs.append(self.recv_from_tokenizer.recv_pyobj(zmq.NOBLOCK))
                except zmq.Again:
                    break
        return broadcast_pyobj(msgs, src=0)

    def send_to_detokenizer(self, msg: Any) -> None:
        if self.tp_rank == 0:
            self.send_to_detokenizer_sock.send_pyobj(msg)

    def send_to_tokenizer(self, msg: Any) -> None:
        if self.tp_rank == 0:
            self.send_to_tokenizer_sock.send_pyobj(msg)
