"""CUDA-core decode attention over a page-size-1 bf16 KV pool (`csrc/decode_attn_kernel.cuh`), built on first use.

The semantics of `decode_attention_fwd` with per-request splits taken from the lengths (`num_kv_splits=None`)
and the fused merge, for bf16 pools, head dim 128 and up to 8 q heads per kv head; no rope, cascade or launch
order. Not on the serving path yet: `benchmark/gpu_cuda_decode.py` times it against the Triton kernel at the
small batches with long contexts of an online serving step, where the Triton kernel reads K/V at 1.3-2.5 TB/s.
The partials and log-sum-exps go to the Triton kernel's scratch layout, so the two can share buffers.

`load()` returns None (and remembers why) where there is no CUDA or no compiler; the build is cached as
`cuda_build` describes.
"""

from __future__ import annotations

from types import ModuleType
from typing import Optional

import torch

from radixlm_kernel import decode_splits
from radixlm_kernel.cuda_build import csrc, load_cached

SOURCES = csrc("decode_attn_binding.cpp", "decode_attn_g1.cu", "decode_attn_g2.cu", "decode_attn_g4.cu",
               "decode_attn_g8.cu")
HEADERS = csrc("decode_attn.h", "decode_attn_kernel.cuh", "decode_attn_launch.cuh")
# id -> (lanes per token, 16-byte loads of K and of V in flight per lane, warps per block), as decode_attn_launch.cuh
CONFIGS = {0: (16, 4, 4), 1: (16, 2, 4), 2: (16, 8, 4), 3: (8, 2, 4), 4: (8, 4, 4), 5: (16, 4, 2), 6: (16, 8, 2),
           7: (8, 4, 2), 8: (16, 4, 8)}
DEFAULT_CONFIG = 0
HEAD_DIM = 128
MAX_GROUP = 8

_ext: Optional[ModuleType] = None
load_error: Optional[str] = None


def load() -> Optional[ModuleType]:
    """The built extension, or None where it cannot be built (`load_error` says why)."""
    global _ext, load_error
    if _ext is not None or load_error is not None:
        return _ext
    if not torch.cuda.is_available():
        load_error = "no CUDA device"
        return None
    try:
        _ext = load_cached("radixlm_decode", SOURCES, HEADERS)
    except Exception as e:  # noqa: BLE001 - no nvcc / ninja: callers keep the Triton kernel
        load_error = f"{type(e).__name__}: {e}"
    return _ext


def _check(name: str, t: torch.Tensor, dtypes: tuple[torch.dtype, ...], dim: int, vector_rows: bool = False) -> None:
    """ValueError naming `name` unless t is a `dim`-D tensor of one of `dtypes` with a unit last stride (and, with
    `vector_rows`, every row 16-byte aligned: the kernel reads them 16 bytes at a time)."""
    if t.dtype not in dtypes or t.dim() != dim:
        raise ValueError(f"{name} must be a {dim}-D tensor of {' or '.join(map(str, dtypes))}, got {t.dtype} "
                         f"{tuple(t.shape)}")
    if t.stride(-1) != 1:
        raise ValueError(f"{name} must have a unit last stride, got strides {t.stride()}")
    if vector_rows and (t.data_ptr() % 16 or any(s % 8 for s in t.stride()[:-1])):
        raise ValueError(f"{name} must start 16-byte aligned with rows a multiple of 8 elements apart")


def check_inputs(q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, o: torch.Tensor,
                 req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                 attn_logits: torch.Tensor, attn_lse: torch.Tensor, split_counters: torch.Tensor, grid_splits: int,
                 config: int) -> None:
    """ValueError naming the parameter for what the kernel cannot take. Checked here, not in the extension (see
    `cuda_gemv.check_inputs`)."""
    bf16, index = (torch.bfloat16,), (torch.int32, torch.int64)
    for name, t in (("q", q), ("k_buffer", k_buffer), ("v_buffer", v_buffer), ("o", o)):
        _check(name, t, bf16, 3, vector_rows=name != "o")
        if t.shape[-1] != HEAD_DIM:
            raise ValueError(f"{name} must have head dim {HEAD_DIM}, got {tuple(t.shape)}")
    bs, num_q_heads, num_kv_heads = q.shape[0], q.shape[1], k_buffer.shape[1]
    if num_q_heads % num_kv_heads or num_q_heads // num_kv_heads > MAX_GROUP or v_buffer.shape[1] != num_kv_heads:
        raise ValueError(f"q's {num_q_heads} heads must be 1 to {MAX_GROUP} per kv head of k_buffer and v_buffer "
                         f"({num_kv_heads}, {v_buffer.shape[1]})")
    if o.shape != q.shape:
        raise ValueError(f"o must match q {tuple(q.shape)}, got {tuple(o.shape)}")
    _check("req_to_token", req_to_token, (torch.int32,), 2)
    for name, t in (("req_pool_indices", req_pool_indices), ("seq_lens", seq_lens)):
        _check(name, t, index, 1)
        if t.shape[0] < bs:
            raise ValueError(f"{name} must hold {bs} entries, got {t.shape[0]}")
    if not 1 <= grid_splits <= 65535:
        raise ValueError(f"max_kv_splits must be 1 to 65535, got {grid_splits}")
    _check("attn_logits", attn_logits, (torch.float32,), 4)
    _check("attn_lse", attn_lse, (torch.float32,), 3)
    if (attn_logits.shape[0] < bs or attn_logits.shape[1] != num_q_heads or attn_logits.shape[2] < grid_splits
            or attn_logits.shape[3] != HEAD_DIM or attn_lse.shape[0] < bs or attn_lse.shape[1] != num_q_heads
            or attn_lse.shape[2] < grid_splits):
        raise ValueError(f"attn_logits {tuple(attn_logits.shape)} / attn_lse {tuple(attn_lse.shape)} do not fit bs "
                         f"{bs}, {num_q_heads} q heads, {grid_splits} splits")
    _check("split_counters", split_counters, (torch.int32,), 2)
    if split_counters.shape[0] < bs or split_counters.shape[1] < num_kv_heads:
        raise ValueError(f"split_counters must be at least [{bs}, {num_kv_heads}], got {tuple(split_counters.shape)}")
    if config not in CONFIGS:
        raise ValueError(f"config must be one of {sorted(CONFIGS)}, got {config}")
    tensors = (q, k_buffer, v_buffer, o, req_to_token, req_pool_indices, seq_lens, attn_logits, attn_lse,
               split_counters)
    if any(t.device != q.device or not t.is_cuda for t in tensors):
        raise ValueError("every tensor must be on q's CUDA device")


def decode_attention_cuda(q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, o: torch.Tensor,
                          req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                          sm_scale: float, max_kv_splits: int, attn_logits: Optional[torch.Tensor] = None,
                          attn_lse: Optional[torch.Tensor] = None, split_counters: Optional[torch.Tensor] = None,
                          config: int = DEFAULT_CONFIG, align: int = 1) -> None:
    """`decode_attention_fwd(q, k_buffer, v_buffer, o, req_to_token, req_pool_indices, seq_lens, None, sm_scale,
    max_kv_splits, attn_logits, attn_lse, split_counters=split_counters)` on CUDA cores: q, o `[bs, Hq, 128]`,
    k/v_buffer `[slots, Hk, 128]` bf16; row b gets `compute_num_kv_splits`'s splits under a grid of
    `max_kv_splits`, each a multiple of `align` tokens long but the last. `split_counters` (int32 `[>=bs, >=Hk]`,
    zeros; left zero) and the scratch are allocated when None; pass static ones under a CUDA graph."""
    bs, num_q_heads = q.shape[0], q.shape[1]
    if attn_logits is None:
        attn_logits = torch.empty((bs, num_q_heads, max_kv_splits, HEAD_DIM), dtype=torch.float32, device=q.device)
    if attn_lse is None:
        attn_lse = torch.empty((bs, num_q_heads, max_kv_splits), dtype=torch.float32, device=q.device)
    if split_counters is None:
        split_counters = torch.zeros((bs, k_buffer.shape[1]), dtype=torch.int32, device=q.device)
    check_inputs(q, k_buffer, v_buffer, o, req_to_token, req_pool_indices, seq_lens, attn_logits, attn_lse,
                 split_counters, max_kv_splits, config)
    if align < 1:
        raise ValueError(f"align must be a positive number of tokens, got {align}")
    ext = load()
    if ext is None:
        raise RuntimeError(f"the CUDA decode attention extension is unavailable: {load_error}")
    if bs == 0:
        return
    err = ext.decode_attention(q, k_buffer, v_buffer, o, req_to_token, req_pool_indices, seq_lens, attn_logits,
                               attn_lse, split_counters, float(sm_scale), num_q_heads // k_buffer.shape[1],
                               max_kv_splits, decode_splits.MIN_SPLIT_LEN, align, config)
    if err:
        raise RuntimeError(f"the CUDA decode attention launch failed with cudaError_t {err}")
