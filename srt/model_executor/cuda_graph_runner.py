"""CUDA graphs for decode: capture the model forward once per batch size, replay with padding.

A decode batch of size bs replays the graph of the smallest captured size >= bs. The
graphs read static input buffers; the padded rows point at KV slot 0 (the allocator's
reserved padding slot) with sequence length 1, so they compute garbage that nobody reads
and write nowhere that matters. The graph also takes the argmax of the logits (greedy decoding's
token, which every sampling mode needs); the rest of sampling runs after the replay, outside it.
Before each replay the attention backend re-plans from the padded static batch, whose
`seq_lens_cpu` holds the real host lengths (1 for padded rows) for backends that plan on
the host (flashinfer).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import logging
import time
from typing import TYPE_CHECKING, Iterator, Optional

import torch

from radixlm.layers.logits_processor import LogitsProcessorOutput
from radixlm.model_executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.sampling.sampler import greedy_argmax

if TYPE_CHECKING:
    from radixlm.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)

CAPTURE_SIZES = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 288, 320,
                 352, 384, 448, 512]


def capture_batch_sizes(max_bs: int) -> list[int]:
    sizes = [b for b in CAPTURE_SIZES if b <= max_bs]
    if not sizes or sizes[-1] != max_bs:
        sizes.append(max_bs)
    return sizes


class CudaGraphRunner:
    def __init__(self, model_runner: "ModelRunner") -> None:
        self.model_runner = model_runner
        max_bs = min(model_runner.server_args.cuda_graph_max_bs, model_runner.max_running_requests)
        self.capture_bs = capture_batch_sizes(max_bs)
        self.max_bs = self.capture_bs[-1]
        dev = model_runner.device
        self.input_ids = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.req_pool_indices = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.seq_lens = torch.ones(self.max_bs, dtype=torch.int64, device=dev)
        self.out_cache_loc = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.input_views: dict[int, list[torch.Tensor]] = {}  # the static inputs' first bs rows, per bs
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, LogitsProcessorOutput] = {}
        self.pool = None
        model_runner.attn_backend.init_cuda_graph_state(self.max_bs)
        start = time.perf_counter()
        self.capture()
        logger.info("captured CUDA graphs for decode batch sizes %s in %.1f s", self.capture_bs,
                    time.perf_counter() - start)

    def can_run(self, forward_batch: ForwardBatch) -> bool:
        return forward_batch.forward_mode.is_decode() and forward_batch.batch_size <= self.max_bs

    def _static_batch(self, bs: int, seq_lens_cpu: Optional[list[int]] = None) -> ForwardBatch:
        fb = ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=bs, input_ids=self.input_ids[:bs],
                          positions=self.positions[:bs], req_pool_indices=self.req_pool_indices[:bs],
                          seq_lens=self.seq_lens[:bs], out_cache_loc=self.out_cache_loc[:bs],
                          seq_lens_cpu=seq_lens_cpu or [1] * bs)
        return self.model_runner.attach(fb)

    @torch.inference_mode()
    def capture(self) -> None:
        with _no_gc_during_capture():
            self._capture_all()

    def _capture_all(self) -> None:
        model = self.model_runner.model
        backend = self.model_runner.attn_backend
        for bs in reversed(self.capture_bs):  # largest first, so smaller graphs reuse its memory pool
            fb = self._static_batch(bs)
            backend.init_forward_metadata_capture_cuda_graph(fb)
            for _ in range(2):  # warm up (Triton compiles here, never inside the capture)
                backend.init_forward_metadata_in_graph(fb)
                greedy_argmax(model(fb.input_ids, fb.positions, fb).next_token_logits)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                backend.init_forward_metadata_in_graph(fb)
                out = model(fb.input_ids, fb.positions, fb)
                out.next_token_greedy_ids = greedy_argmax(out.next_token_logits)
            if self.pool is None:
                self.pool = graph.pool()
            self.graphs[bs], self.outputs[bs] = graph, out
        torch.cuda.synchronize()

    def _input_views(self, bs: int) -> list[torch.Tensor]:
        views = self.input_views.get(bs)
        if views is None:
            views = self.input_views[bs] = [buf[:bs] for buf in (self.input_ids, self.positions,
                                                                  self.req_pool_indices, self.seq_lens,
                                                                  self.out_cache_loc)]
        return views

    @torch.inference_mode()
    def replay(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        bs = forward_batch.batch_size
        padded = self.capture_bs[bisect.bisect_left(self.capture_bs, bs)]
        if padded != bs:
            # padded rows must never write into a live request's KV slot
            self.out_cache_loc[bs:padded].zero_()
            self.seq_lens[bs:padded].fill_(1)
            self.req_pool_indices[bs:padded].zero_()
        # the five inputs in one multi-tensor copy kernel instead of five copy launches
        torch._foreach_copy_(self._input_views(bs), [
            forward_batch.input_ids, forward_batch.positions, forward_batch.req_pool_indices, forward_batch.seq_lens,
            forward_batch.out_cache_loc])
        backend = self.model_runner.attn_backend
        if backend.plans_replay_on_host:
            seq_lens_cpu = list(forward_batch.seq_lens_cpu) + [1] * (padded - bs)
            backend.init_forward_metadata_replay_cuda_graph(self._static_batch(padded, seq_lens_cpu))
        self.graphs[padded].replay()
        out = self.outputs[padded]
        # the token ids outlive the step (the next batch's input, the host copy): a copy, since the next
        # replay overwrites the graph's own; the logits are read before that and stay a view
        return LogitsProcessorOutput(next_token_logits=out.next_token_logits[:bs],
                                     next_token_greedy_ids=out.next_token_greedy_ids[:bs].clone())


@contextlib.contextmanager
def _no_gc_during_capture() -> Iterator[None]:
    """Collect dead objects first, then keep the cyclic collector off while capturing: a collection inside a
    capture that frees an unreachable CUDA graph (an earlier runner's, say) destroys it, a call not permitted
    while a stream captures, and the capture fails ("operation failed due to a previous error during
    capture"; the torch of the H200 image, 2.11, and 2.13 no longer collect on entering `torch.cuda.graph`)."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
