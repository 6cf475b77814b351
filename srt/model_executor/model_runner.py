"""ModelRunner: one rank's model, KV pools and attention backend; `forward(ForwardBatch) -> ForwardOutput`.

It is pure with respect to scheduler state: it reads the batch, writes the new tokens'
K/V into the pool slots the batch names, and returns sampled tokens (and logprobs).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Optional

import torch

from radixlm.distributed import all_reduce_min_int, init_distributed
from radixlm.layers import kernel_dispatch
from radixlm.layers.attention.base import create_attention_backend
from radixlm.layers.logits_processor import LogitsProcessorOutput, next_token_logprobs
from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from radixlm.model_executor.forward_batch import ForwardBatch
from radixlm.model_executor.forward_output import ForwardOutput
from radixlm.model_executor.memory_report import MemoryReport, memory_report
from radixlm.sampling.sampler import Sampler
from radixlm.server_args import ServerArgs

if TYPE_CHECKING:
    from radixlm.model_executor.cuda_graph_runner import CudaGraphRunner

logger = logging.getLogger(__name__)

CPU_DEFAULT_MAX_TOKENS = 65536
CPU_KV_RAM_FRACTION = 0.25
MAX_RUNNING_REQUESTS_CAP = {"cpu": 256, "cuda": 2048}
REQ_TO_TOKEN_BUDGET_BYTES = 1 << 30  # bounds max_running_requests * context_len
DIST_PORT_OFFSET = 111  # tensor-parallel rendezvous port = --port + this, without --dist-init-addr


class ModelRunner:
    def __init__(self, server_args: ServerArgs, tp_rank: int = 0, tp_size: int = 1, gpu_id: int = 0) -> None:
        from radixlm.model_loader.loader import load_model
        from radixlm.model_loader.model_config import ModelConfig

        self.server_args = server_args
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.device = torch.device("cuda", gpu_id) if server_args.device == "cuda" else torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        init_distributed(tp_rank, tp_size, backend="nccl" if self.device.type == "cuda" else "gloo",
                         init_method=_init_method(server_args))
        self.model_config = ModelConfig.from_server_args(server_args)
        self.dtype = self.model_config.dtype
        self.kv_cache_dtype = _kv_cache_dtype(server_args.kv_cache_dtype, self.dtype)
        self.model = load_model(self.model_config, server_args.load_format, str(self.device), tp_rank, tp_size)
        if self.device.type == "cuda":
            kernel_dispatch.prepare_cuda_gemv(self.dtype)  # builds once per machine; never inside a capture
        self.num_kv_heads = max(1, self.model_config.num_key_value_heads // tp_size)
        self.init_memory_pool()
        self.attn_backend = create_attention_backend(server_args.attention_backend, self)
        self.sampler = Sampler()
        self.cuda_graph_runner = self.init_cuda_graphs()
        self.warm_up_kernels()
        logger.info("device memory after startup: %s", self.memory_report().as_dict())

    def init_cuda_graphs(self) -> Optional["CudaGraphRunner"]:
        """Capture decode graphs on CUDA unless disabled (the torch_native backend cannot be captured)."""
        if self.device.type != "cuda" or self.server_args.disable_cuda_graph:
            return None
        if self.server_args.attention_backend == "torch_native":
            logger.info("CUDA graphs off: the torch_native attention backend cannot be captured")
            return None
        from radixlm.model_executor.cuda_graph_runner import CudaGraphRunner

        return CudaGraphRunner(self)

    def warm_up_kernels(self) -> None:
        """On CUDA, the attention backend's batch-dependent kernel variants, compiled before serving (each
        is ~1 s on a machine with no Triton cache; on a live batch that stalls every running request)."""
        if self.device.type != "cuda":
            return
        start = time.perf_counter()
        launches = self.attn_backend.warm_up(self)
        torch.cuda.synchronize()
        if launches:
            logger.info("attention kernels warmed up: %d variants in %.1f s", launches, time.perf_counter() - start)

    # ---- memory ------------------------------------------------------------------

    def kv_bytes_per_token(self) -> int:
        cfg = self.model_config
        return MHATokenToKVPool.bytes_per_token(self.num_kv_heads, cfg.head_dim, cfg.num_hidden_layers,
                                                self.kv_cache_dtype)

    def profile_max_num_tokens(self) -> int:
        """KV slots this rank can hold: the flag, else a CPU RAM share, else the CUDA static fraction."""
        if self.server_args.max_total_tokens is not None:
            return self.server_args.max_total_tokens
        per_token = self.kv_bytes_per_token()
        if self.device.type == "cpu":
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            return max(1, min(CPU_DEFAULT_MAX_TOKENS, int(ram * CPU_KV_RAM_FRACTION) // per_token))
        torch.cuda.synchronize(self.device)
        free, total = torch.cuda.mem_get_info(self.device)
        # after the weights are loaded, keep (1 - fraction) of the device for activations and graphs
        budget = free - total * (1.0 - self.server_args.mem_fraction_static)
        if budget <= 0:
            raise RuntimeError(f"no GPU memory left for the KV cache: {free / 2**30:.1f} GiB free of "
                               f"{total / 2**30:.1f} GiB after weights; raise --mem-fraction-static")
        return int(budget) // per_token

    def memory_report(self) -> MemoryReport:
        pool = self.token_to_kv_pool
        return memory_report(self.model, pool.k_buffer + pool.v_buffer, self.req_to_token_pool.req_to_token,
                             self.device, self.server_args.mem_fraction_static)

    def init_memory_pool(self) -> None:
        max_tokens = all_reduce_min_int(self.profile_max_num_tokens())
        context_len = self.model_config.context_len
        cap = MAX_RUNNING_REQUESTS_CAP[self.device.type]
        context_cap = max(1, REQ_TO_TOKEN_BUDGET_BYTES // (4 * context_len))
        max_reqs = self.server_args.max_running_requests or min(context_cap, cap)
        self.max_running_requests = max(1, min(max_reqs, max_tokens))
        self.max_total_num_tokens = max_tokens
        cfg = self.model_config
        self.req_to_token_pool = ReqToTokenPool(self.max_running_requests, context_len + 4, self.device)
        self.token_to_kv_pool = MHATokenToKVPool(max_tokens, self.kv_cache_dtype, self.num_kv_heads, cfg.head_dim,
                                                 cfg.num_hidden_layers, self.device)
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(max_tokens, self.device)
        logger.info("KV cache: %d tokens (%.2f GiB), max_running_requests=%d", max_tokens,
                    max_tokens * self.kv_bytes_per_token() / 2**30, self.max_running_requests)

    # ---- forward -----------------------------------------------------------------

    def attach(self, forward_batch: ForwardBatch) -> ForwardBatch:
        forward_batch.req_to_token_pool = self.req_to_token_pool
        forward_batch.token_to_kv_pool = self.token_to_kv_pool
        forward_batch.attn_backend = self.attn_backend
        return forward_batch

    @torch.inference_mode()
    def forward_logits(self, forward_batch: ForwardBatch) -> LogitsProcessorOutput:
        """Run the model only (the part CUDA graphs capture for decode)."""
        if self.cuda_graph_runner is not None and self.cuda_graph_runner.can_run(forward_batch):
            return self.cuda_graph_runner.replay(forward_batch)
        self.attach(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        return self.model(forward_batch.input_ids, forward_batch.positions, forward_batch)

    @torch.inference_mode()
    def sample(self, logits_output: LogitsProcessorOutput, forward_batch: ForwardBatch) -> ForwardOutput:
        logits = logits_output.next_token_logits
        next_ids = self.sampler(logits, forward_batch.sampling_info, logits_output.next_token_greedy_ids)
        out = ForwardOutput(next_token_ids=next_ids)
        if forward_batch.return_logprob:
            k = max(forward_batch.top_logprobs_nums or [0])
            out.next_token_logprobs, out.next_top_logprobs_val, out.next_top_logprobs_idx = \
                next_token_logprobs(logits, next_ids, k)
            out.input_token_logprobs = logits_output.input_token_logprobs
            out.input_top_logprobs_val = logits_output.input_top_logprobs_val
            out.input_top_logprobs_idx = logits_output.input_top_logprobs_idx
        return out

    def forward(self, forward_batch: ForwardBatch) -> ForwardOutput:
        return self.sample(self.forward_logits(forward_batch), forward_batch)


def _kv_cache_dtype(flag: str, model_dtype: torch.dtype) -> torch.dtype:
    choices = {"auto": model_dtype, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
               "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}  # fp8: values stored unscaled
    if flag not in choices:
        raise ValueError(f"--kv-cache-dtype must be one of {list(choices)}, got {flag!r}")
    return choices[flag]


def _init_method(server_args: ServerArgs) -> Optional[str]:
    """--dist-init-addr, else (single node) a local port derived from --port."""
    if server_args.dist_init_addr:
        return f"tcp://{server_args.dist_init_addr}"
    return f"tcp://127.0.0.1:{server_args.port + DIST_PORT_OFFSET}" if server_args.tp_size > 1 else None
