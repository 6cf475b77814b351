"""Server configuration: one frozen dataclass, the flags named as SGLang names them.

Config flows down from here; nothing reads a global. Each rank gets its own copy via
`dataclasses.replace`. `ServerArgs.resolved()` fills the defaults that depend on the
machine (device, chunk size, dtype) so every process sees the same final values.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Optional

from radixlm.function_call.parsers import TOOL_CALL_PARSERS
from radixlm.reasoning_parser import REASONING_PARSERS

SCHEDULE_POLICIES = ("fcfs", "lpm", "lof", "dfs-weight", "random")
ATTENTION_BACKENDS = ("torch_native", "triton", "flashinfer")
GRAMMAR_BACKENDS = ("xgrammar", "none")
LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")
DTYPES = ("auto", "float32", "float16", "bfloat16")
KV_CACHE_DTYPES = ("auto", "float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2")  # fp8: storage, no scales


@dataclass(frozen=True)
class ServerArgs:
    # Model and tokenizer
    model_path: Optional[str] = None  # None: the embedded SmolLM2-135M-Instruct
    tokenizer_path: Optional[str] = None
    load_format: str = "auto"
    dtype: str = "auto"
    device: str = "auto"  # auto | cpu | cuda
    context_length: Optional[int] = None
    served_model_name: Optional[str] = None
    chat_template: Optional[str] = None
    tool_call_parser: Optional[str] = None  # how tool calls look: qwen25 | qwen3_coder | llama3 | mistral | pythonic
    reasoning_parser: Optional[str] = None  # how thinking is marked: deepseek-r1 | deepseek-v3 | qwen3 | ... | kimi
    trust_remote_code: bool = False

    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: Optional[str] = None
    log_level: str = "info"
    enable_metrics: bool = False
    stream_interval: int = 1
    skip_server_warmup: bool = False
    max_queued_requests: Optional[int] = None

    # Parallelism
    tp_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: Optional[str] = None
    enable_tp_consistency_check: bool = False
    tp_consistency_check_interval: int = 64

    # Memory and scheduling
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None
    max_total_tokens: Optional[int] = None
    chunked_prefill_size: Optional[int] = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    enable_mixed_chunk: bool = False
    random_seed: Optional[int] = None

    # Kernels
    attention_backend: Optional[str] = None
    grammar_backend: str = "xgrammar"
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int = 256
    kv_cache_dtype: str = "auto"

    def resolved(self) -> "ServerArgs":
        """Fill machine-dependent defaults; idempotent."""
        import torch

        device = self.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        on_gpu = device == "cuda"
        changes = dict(device=device)
        if self.attention_backend is None:
            changes["attention_backend"] = "triton" if on_gpu else "torch_native"
        if self.chunked_prefill_size is None:
            changes["chunked_prefill_size"] = 8192 if on_gpu else 2048
        if self.mem_fraction_static is None:
            changes["mem_fraction_static"] = 0.88 if on_gpu else 0.0
        if self.random_seed is None:
            changes["random_seed"] = 0
        if self.served_model_name is None:
            changes["served_model_name"] = self.model_path or "SmolLM2-135M-Instruct"
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ValueError(msg)

        need(self.schedule_policy in SCHEDULE_POLICIES, f"--schedule-policy must be one of {SCHEDULE_POLICIES}")
        need(self.attention_backend is None or self.attention_backend in ATTENTION_BACKENDS,
             f"--attention-backend must be one of {ATTENTION_BACKENDS}")
        need(self.load_format in LOAD_FORMATS, f"--load-format must be one of {LOAD_FORMATS}")
        need(self.dtype in DTYPES, f"--dtype must be one of {DTYPES}")
        need(self.kv_cache_dtype in KV_CACHE_DTYPES, f"--kv-cache-dtype must be one of {KV_CACHE_DTYPES}")
        need(self.grammar_backend in GRAMMAR_BACKENDS, f"--grammar-backend must be one of {GRAMMAR_BACKENDS}")
        need(self.tool_call_parser is None or self.tool_call_parser in TOOL_CALL_PARSERS,
             f"--tool-call-parser must be one of {tuple(TOOL_CALL_PARSERS)}")
        need(self.reasoning_parser is None or self.reasoning_parser in REASONING_PARSERS,
             f"--reasoning-parser must be one of {tuple(REASONING_PARSERS)}")
        need(self.tp_size >= 1, "--tp-size must be >= 1")
        need(self.nnodes >= 1 and 0 <= self.node_rank < self.nnodes, "--node-rank must be in [0, --nnodes)")
        need(self.tp_size % self.nnodes == 0, "--tp-size must be divisible by --nnodes")
        need(self.nnodes == 1 or self.dist_init_addr is not None, "--dist-init-addr is required with --nnodes > 1")
        need(self.max_total_tokens is None or self.max_total_tokens > 0, "--max-total-tokens must be positive")
        need(self.max_running_requests is None or self.max_running_requests > 0,
             "--max-running-requests must be positive")
        need(self.chunked_prefill_size is None or self.chunked_prefill_size > 0 or self.chunked_prefill_size == -1,
             "--chunked-prefill-size must be positive (or -1 to disable)")
        need(self.stream_interval >= 1, "--stream-interval must be >= 1")
        need(self.schedule_conservativeness > 0, "--schedule-conservativeness must be positive")

    @property
    def tp_size_per_node(self) -> int:
        return self.tp_size // self.nnodes

    # ---- command line -------------------------------------------------------------

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        d = ServerArgs()
        for f in dataclasses.fields(ServerArgs):
            flag = "--" + f.name.replace("_", "-")
            default = getattr(d, f.name)
            if f.type in ("bool", bool):
                parser.add_argument(flag, action="store_true", default=default)
                continue
            kind = _CLI_TYPES.get(f.name, str)
            kwargs = dict(type=kind, default=default)
            if f.name in _CLI_CHOICES:
                kwargs["choices"] = _CLI_CHOICES[f.name]
            parser.add_argument(flag, **kwargs)

    @staticmethod
    def from_cli_args(args: argparse.Namespace) -> "ServerArgs":
        names = {f.name for f in dataclasses.fields(ServerArgs)}
        return ServerArgs(**{k: v for k, v in vars(args).items() if k in names})


_CLI_TYPES = {
    "context_length": int, "port": int, "stream_interval": int, "max_queued_requests": int,
    "tp_size": int, "nnodes": int, "node_rank": int, "tp_consistency_check_interval": int,
    "mem_fraction_static": float, "max_running_requests": int, "max_total_tokens": int,
    "chunked_prefill_size": int, "max_prefill_tokens": int, "schedule_conservativeness": float,
    "random_seed": int, "cuda_graph_max_bs": int,
}
_CLI_CHOICES = {
    "schedule_policy": SCHEDULE_POLICIES, "attention_backend": ATTENTION_BACKENDS,
    "grammar_backend": GRAMMAR_BACKENDS, "load_format": LOAD_FORMATS, "dtype": DTYPES,
    "kv_cache_dtype": KV_CACHE_DTYPES, "tool_call_parser": tuple(TOOL_CALL_PARSERS),
    "reasoning_parser": tuple(REASONING_PARSERS),
    "device": ("auto", "cpu", "cuda"), "log_level": ("debug", "info", "warning", "error"),
}
