"""Stand-ins that let the real `Scheduler` run on the CPU without a model or sockets (the scheduler
benchmarks and simulations): a model runner with real pools that returns a constant token, and IO
that receives nothing. `stand_ins(io)` swaps them in for one Scheduler's construction."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.memory_pool import ReqToTokenPool
from radixlm.model_executor.forward_output import ForwardOutput
from radixlm.model_executor.memory_report import MemoryReport
from radixlm.server_args import ServerArgs

STAND_IN_TOKEN = 1234  # not an EOS id; the requests also ignore_eos


class StandInModelRunner:
    """Real pools (no KV tensors) and config; `forward` sleeps `latency_s` (0: none) and returns
    `STAND_IN_TOKEN` for every row. The request table is as wide as the model's context
    (`--context-length` narrows it, as for the real runner)."""

    latency_s = 0.0

    def __init__(self, server_args: ServerArgs, tp_rank: int = 0, tp_size: int = 1, gpu_id: int = 0) -> None:
        from radixlm.model_loader.model_config import ModelConfig

        self.model_config = ModelConfig.from_server_args(server_args)
        self.device = torch.device("cpu")
        self.max_total_num_tokens = server_args.max_total_tokens
        self.max_running_requests = server_args.max_running_requests
        self.req_to_token_pool = ReqToTokenPool(self.max_running_requests, self.model_config.context_len + 4,
                                               self.device)
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(self.max_total_num_tokens, self.device)

    def forward(self, forward_batch: Any) -> ForwardOutput:
        if self.latency_s:
            time.sleep(self.latency_s)
        return ForwardOutput(next_token_ids=torch.full((forward_batch.batch_size,), STAND_IN_TOKEN))

    def memory_report(self) -> MemoryReport:
        return MemoryReport(0.0, 0.0, 0.0)  # nothing on a device


class SilentIO:
    """No sockets: nothing arrives, and what the scheduler sends is dropped."""

    def __init__(self, port_args: Any, tp_rank: int) -> None:
        pass

    def recv_requests(self, block: bool = False) -> list[Any]:
        return []

    def send_to_detokenizer(self, msg: Any) -> None:
        pass

    def send_to_tokenizer(self, msg: Any) -> None:
        self.send_to_detokenizer(msg)


@contextmanager
def stand_ins(io: type = SilentIO) -> Iterator[None]:
    """The Scheduler builds its ModelRunner and IO from these module names at construction: swap them in
    for the construction only, so the rest of the process keeps the real ones."""
    import radixlm.managers.scheduler as scheduler_module
    import radixlm.model_executor.model_runner as model_runner_module

    saved = model_runner_module.ModelRunner, scheduler_module.SchedulerIO
    model_runner_module.ModelRunner, scheduler_module.SchedulerIO = StandInModelRunner, io
    try:
        yield
    finally:
        model_runner_module.ModelRunner, scheduler_module.SchedulerIO = saved
