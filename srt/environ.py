"""The one place that reads environment variables (all prefixed RADIXLM_)."""

from __future__ import annotations

import os
import sys


def _get(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"RADIXLM_{name}", default)


def cache_dir() -> str:
    """Where converted model folders are cached."""
    return _get("CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "radixlm")


def ipc_dir() -> str:
    """Where per-instance ZMQ ipc:// socket files are created."""
    return _get("IPC_DIR") or "/tmp"


def test_server_timeout_s() -> float:
    return float(_get("TEST_SERVER_TIMEOUT_S", "300"))


def test_tokenizer_path() -> str | None:
    """Tests: a tokenizer folder to use where the embedded SmolLM2 is not installed (a GPU machine)."""
    return _get("TEST_TOKENIZER") or None


def dist_timeout_s() -> float:
    """Bound on a tensor-parallel CPU (gloo) collective: a dead or stuck rank fails its peers
    within this many seconds instead of hanging them."""
    return float(_get("DIST_TIMEOUT_S", "60"))


def dist_startup_timeout_s() -> float:
    """Bound on the rendezvous and startup collectives (other ranks may still be loading weights)."""
    return float(_get("DIST_STARTUP_TIMEOUT_S", "600"))


def set_default_nccl_env() -> None:
    """NCCL defaults for the scheduler ranks (set only where the user has not): NVLink SHARP
    (multicast) stays off, since lent multi-GPU hosts do not support it reliably."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def decode_cascade() -> bool:
    """RADIXLM_DECODE_CASCADE=0 turns off cascade decode attention in the triton backend (decode
    batches read a shared cached prefix once per block of requests); on by default."""
    return _get("DECODE_CASCADE", "1") != "0"


def decode_fused_rope() -> bool:
    """RADIXLM_DECODE_FUSED_ROPE=0: the triton backend's decode (outside cascade batches) takes q/k
    rotated and k/v stored by the separate rotary kernel instead of doing both inside the attention
    kernel (for A/B runs); on by default."""
    return _get("DECODE_FUSED_ROPE", "1") != "0"


def decode_longest_first() -> bool:
    """RADIXLM_DECODE_LONGEST_FIRST=0: cascade-sized decode batches launch their attention programs in
    batch order instead of longest context first (for A/B runs); on by default."""
    return _get("DECODE_LONGEST_FIRST", "1") != "0"


def prune_last_layer() -> bool:
    """RADIXLM_PRUNE_LAST_LAYER=0: extend batches run the last decoder layer's attention output, o_proj
    and MLP for every new token instead of only each request's last one, the only row the next-token
    logits read (for A/B runs); on by default."""
    return _get("PRUNE_LAST_LAYER", "1") != "0"


def fused_gemv_max_tokens(default: int) -> int:
    """RADIXLM_FUSED_GEMV_MAX_TOKENS=N: batches of at most N tokens (N <= 16) take the fused small-batch GEMV
    kernels (norm / SiLU-and-mul folded into the matmul) on CUDA; 0 turns them off (for A/B runs)."""
    value = _get("FUSED_GEMV_MAX_TOKENS", str(default))
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"RADIXLM_FUSED_GEMV_MAX_TOKENS must be an integer (0 turns the fused GEMVs off), "
                         f"got {value!r}") from None


def cuda_gemv_max_tokens(default: int) -> int:
    """RADIXLM_CUDA_GEMV_MAX_TOKENS=N: bf16 batches of at most N tokens (N <= 8) take the CUDA C++ GEMVs
    (`radixlm_kernel.cuda_gemv`: add + RMSNorm and SiLU-and-mul folded into the projections, no split-K) on
    CUDA; 0 turns them off (for A/B runs). Without a CUDA compiler the layers keep cuBLAS (one log line)."""
    value = _get("CUDA_GEMV_MAX_TOKENS", str(default))
    try:
        tokens = int(value)
    except ValueError:
        tokens = -1
    if not 0 <= tokens <= 8:
        raise ValueError(f"RADIXLM_CUDA_GEMV_MAX_TOKENS must be an integer from 0 (off) to 8, got {value!r}")
    return tokens


CUDA_GEMV_OP_NAMES = ("qkv", "o_proj", "gate_up", "down", "lm_head")


def cuda_gemv_ops(default: str) -> frozenset[str]:
    """RADIXLM_CUDA_GEMV_OPS=qkv,o_proj,...: which projections take the CUDA C++ GEMVs when they are on
    (`cuda_gemv_max_tokens`); the others keep cuBLAS (for per-projection A/B runs)."""
    value = _get("CUDA_GEMV_OPS", default) or ""
    ops = frozenset(op.strip() for op in value.split(",") if op.strip())
    unknown = sorted(ops - set(CUDA_GEMV_OP_NAMES))
    if unknown:
        raise ValueError(f"RADIXLM_CUDA_GEMV_OPS takes a comma-separated subset of {list(CUDA_GEMV_OP_NAMES)}, "
                         f"got unknown {unknown} in {value!r}")
    return ops


def step_trace_path() -> str | None:
    """RADIXLM_STEP_TRACE=FILE: the overlap loop appends one JSON line per batch to FILE (host build,
    wait and processing times; on CUDA the device time and the idle gap before each batch)."""
    return _get("STEP_TRACE") or None


def uvicorn_loop_http() -> tuple[str, str]:
    """RADIXLM_UVICORN=LOOP,HTTP: uvicorn's event loop and HTTP parser for the server (default "auto,auto":
    uvloop and httptools where installed, else asyncio and h11); e.g. "asyncio,h11" for an A/B run."""
    value = _get("UVICORN") or "auto,auto"
    loop, _, http = value.partition(",")
    if loop not in ("auto", "asyncio", "uvloop") or http not in ("auto", "h11", "httptools"):
        raise ValueError(f"RADIXLM_UVICORN must be LOOP,HTTP (auto|asyncio|uvloop, auto|h11|httptools), got {value!r}")
    return loop, http


def hop_trace_path() -> str | None:
    """RADIXLM_HOP_TRACE=FILE: every server process appends a line to FILE at each hop a request's
    messages pass (HTTP in, scheduler, detokenizer, HTTP out); see `radixlm.managers.hop_trace`."""
    return _get("HOP_TRACE") or None


def prefill_beside_decode() -> bool:
    """RADIXLM_PREFILL_BESIDE_DECODE=0: the overlap loop drains an in-flight decode before every prefill
    instead of launching the prefill beside it (on CUDA on a high-priority stream); on by default."""
    return _get("PREFILL_BESIDE_DECODE", "1") != "0"


def lag_for_frees() -> bool:
    """RADIXLM_LAG_FOR_FREES=0: when a prefill beside the in-flight decode fails while finished requests'
    releases still wait on that decode, the overlap loop drains it (the old way) instead of lagging one
    more decode and retrying beside it; on by default (an A/B switch)."""
    return _get("LAG_FOR_FREES", "1") != "0"


DEFAULT_DECODE_PACING_MS = 0.5


def decode_pacing() -> tuple[str, float]:
    """RADIXLM_DECODE_PACING=auto|MARGIN_MS|off: the overlap loop launches the next decode step only this
    long (plus the measured build time) before the one in flight is expected to end, watching for arrivals
    meanwhile (`radixlm.managers.decode_pacer`). Opt-in until a device A/B shows it pays. Returns (mode,
    margin in seconds): unset or "off", ("off", 0.0); "auto", ("auto", 0.5 ms): on where the loop watches
    for arrivals (CUDA, one rank); a number, ("on", it): on everywhere (the CPU too, for tests)."""
    value = _get("DECODE_PACING")
    word = (value or "off").strip().lower()
    if word == "off":
        return "off", 0.0
    if word == "auto":
        return "auto", DEFAULT_DECODE_PACING_MS / 1e3
    try:
        margin = float(value)
        if not margin >= 0:
            raise ValueError
    except ValueError:
        raise ValueError("RADIXLM_DECODE_PACING must be a margin in milliseconds (>= 0), 'auto' or 'off', "
                         f"got {value!r}") from None
    return "on", margin / 1e3


def mp_start_method(device: str) -> str:
    """RADIXLM_MP_START_METHOD=spawn|forkserver: how the serving children start (see
    managers/process_start.py). Default: forkserver on the CPU under Linux, else spawn; forkserver is
    refused off the CPU (on an H100 its children failed with "Cannot re-initialize CUDA in forked
    subprocess")."""
    value = _get("MP_START_METHOD")
    if value is None:
        return "forkserver" if device == "cpu" and sys.platform.startswith("linux") else "spawn"
    if value not in ("spawn", "forkserver"):
        raise ValueError(f"RADIXLM_MP_START_METHOD must be 'spawn' or 'forkserver', got {value!r}")
    if value == "forkserver" and device != "cpu":
        raise ValueError(f"RADIXLM_MP_START_METHOD=forkserver works on the CPU only, not with device {device!r}: "
                         "a preloaded module queries CUDA at import, and torch then refuses CUDA in forked children")
    return value
