"""GEMV for small batches (M <= 16 tokens) with the op before the matmul folded in.

`y[m, n] = sum_k x'[m, k] * W[n, k] (+ bias[n])`, W `[N, K]` row-major (nn.Linear's layout), where x' is
- `linear_gemv`: x itself;
- `rmsnorm_gemv`: `h * rsqrt(mean(h**2) + eps) * g` with `h = x + residual` (rounded to the residual's dtype,
  as `fused_add_rmsnorm` does) or `h = x`. One pass over K: each program accumulates `W . (h * g)` and
  `sum(h**2)` in the same loop and scales by the rsqrt at the end. Program 0 writes `h` to a new buffer
  (the others are still reading the old residual, so it cannot be in place);
- `silu_mul_gemv`: `silu(gate_up[:, :K]) * gate_up[:, K:]`.

One program per `block_n` output rows loops over all of K: no split-K (the norm needs all of K in every
program), no atomics. Decode is bandwidth-bound, so what matters is wide coalesced weight loads and enough
bytes in flight. Two inner products: `dot=False` multiplies elementwise into a `[M, block_n, block_k]`
float32 accumulator reduced once after the loop (M = 1-2; Triton does not software-pipeline these loads,
so the bytes in flight come from the tile size and the resident programs); `dot=True` puts the weight
tile against x' transposed and padded to 16 columns through the tensor cores ("swap AB"), its loads
pipelined over `num_stages` (M = 4-16). Launch parameters are the module-level tables below, which
`benchmark/gpu_gemv_sweep.py` measures. Under TRITON_INTERPRET=1 (CPU tests) pass float32 tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from radixlm_kernel.utils import next_power_of_2

MAX_M = 16
PLAIN, NORM, SILU_MUL = 0, 1, 2


@dataclass(frozen=True)
class GemvConfig:
    dot: bool  # tensor-core inner product (weight tile x x'^T) instead of elementwise FMA
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


# By M bucket (M rounded up to a power of two), and per (N, K, M bucket) for the Llama-3.1-8B projections:
# the best of benchmark/gpu_gemv_sweep.py on an H200 (2026-12-01, RESULTS.md). Even these lose to cuBLAS
# plus the separate norm at every M but o_proj at M = 1, so the runtime leaves the fused path off.
CONFIGS: dict[int, GemvConfig] = {
    1: GemvConfig(False, 8, 512, 4, 1),
    2: GemvConfig(False, 8, 256, 4, 1),
    4: GemvConfig(True, 64, 128, 4, 3),
    8: GemvConfig(True, 64, 128, 4, 3),
    16: GemvConfig(True, 64, 128, 4, 3),
}
SHAPE_CONFIGS: dict[tuple[int, int, int], GemvConfig] = {
    (6144, 4096, 1): GemvConfig(False, 8, 1024, 8, 1),
    (6144, 4096, 2): GemvConfig(False, 8, 256, 4, 1),
    (6144, 4096, 4): GemvConfig(True, 64, 128, 4, 3),
    (6144, 4096, 8): GemvConfig(True, 64, 128, 4, 3),
    (6144, 4096, 16): GemvConfig(True, 64, 128, 4, 3),
    (4096, 4096, 1): GemvConfig(False, 8, 512, 4, 1),
    (4096, 4096, 2): GemvConfig(True, 32, 256, 4, 3),
    (4096, 4096, 4): GemvConfig(True, 16, 256, 4, 4),
    (4096, 4096, 8): GemvConfig(True, 16, 256, 4, 4),
    (4096, 4096, 16): GemvConfig(True, 32, 256, 4, 3),
    (28672, 4096, 1): GemvConfig(False, 8, 512, 4, 1),
    (28672, 4096, 2): GemvConfig(False, 8, 256, 4, 1),
    (28672, 4096, 4): GemvConfig(True, 64, 128, 4, 3),
    (28672, 4096, 8): GemvConfig(True, 64, 128, 4, 3),
    (28672, 4096, 16): GemvConfig(True, 64, 128, 4, 3),
    (4096, 14336, 1): GemvConfig(False, 8, 512, 4, 1),
    (4096, 14336, 2): GemvConfig(True, 32, 256, 4, 3),
    (4096, 14336, 4): GemvConfig(True, 64, 128, 4, 3),
    (4096, 14336, 8): GemvConfig(True, 64, 128, 4, 3),
    (4096, 14336, 16): GemvConfig(True, 32, 256, 4, 3),
    (128256, 4096, 1): GemvConfig(False, 16, 256, 4, 1),
    (128256, 4096, 2): GemvConfig(False, 16, 128, 4, 1),
    (128256, 4096, 4): GemvConfig(True, 64, 128, 4, 3),
    (128256, 4096, 8): GemvConfig(True, 64, 128, 4, 3),
    (128256, 4096, 16): GemvConfig(True, 64, 128, 4, 3),
}


def config_for(n: int, k: int, m: int) -> GemvConfig:
    """The launch config for weight `[n, k]` and m tokens: measured for this shape, else the M bucket's."""
    bucket = next_power_of_2(m)
    return SHAPE_CONFIGS.get((n, k, bucket)) or CONFIGS[bucket]


@triton.jit
def _x_prime(x_ptr, res_ptr, res_out_ptr, g_ptr, x_off, r_off, ro_off, g_off, mask, res_mask, K,
             PROLOGUE: tl.constexpr, HAS_RES: tl.constexpr, STORE_RES: tl.constexpr):
    """(x', h) in float32 at the given offsets (any tile shape); h, the norm's input, only matters to the norm."""
    h = tl.load(x_ptr + x_off, mask=mask, other=0.0).to(tl.float32)
    xp = h
    if PROLOGUE == 2:  # SiLU-and-mul: x is gate_up [M, 2K]
        up = tl.load(x_ptr + x_off + K, mask=mask, other=0.0).to(tl.float32)
        xp = h / (1.0 + tl.exp(-h)) * up
    if PROLOGUE == 1:
        if HAS_RES:
            h_res = (h + tl.load(res_ptr + r_off, mask=mask, other=0.0).to(tl.float32)).to(res_ptr.dtype.element_ty)
            if STORE_RES:
                tl.store(res_out_ptr + ro_off, h_res, mask=res_mask)
            h = h_res.to(tl.float32)
        xp = h * tl.load(g_ptr + g_off, mask=mask, other=0.0).to(tl.float32)
    return xp, h


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, res_ptr, res_out_ptr, g_ptr, M, N, K, sx, sw, so, sr, sro, eps,
                 PROLOGUE: tl.constexpr, HAS_RES: tl.constexpr, STORE_RES: tl.constexpr, HAS_BIAS: tl.constexpr,
                 DOT: tl.constexpr, DOT_PRECISION: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    # rows past N re-read row N-1 (unmasked, coalesced loads); the store drops them
    w_rows = tl.minimum(n, N - 1).to(tl.int64) * sw
    rows = tl.arange(0, BLOCK_M)
    m_rows = rows.to(tl.int64)
    res_rows = rows < tl.where(pid == 0, M, 0)  # program 0 writes the new residual
    if DOT:
        # [BLOCK_N, BLOCK_K] weight tile x [BLOCK_K, BLOCK_M] x'^T (BLOCK_M >= 16) on the tensor cores
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        ss = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    else:
        # elementwise into [BLOCK_M, BLOCK_N, BLOCK_K]: the weight tile is loaded repeated over M and the x tile
        # over N (L1 serves the repeats), so both loads and the accumulator share one register layout; tiles
        # of other shapes get other layouts, and converting the weight tile costs a shared-memory round trip
        zero_m, zero_n = rows[:, None, None] * 0, (n * 0)[None, :, None]
        acc = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], dtype=tl.float32)
        ss = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], dtype=tl.float32)  # sum of h**2, reduced after the loop
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        if DOT:
            kk = k[None, :]
            mask = (rows[:, None] < M) & (kk < K)
            w_off = w_rows[:, None] + kk
            xp, h = _x_prime(x_ptr, res_ptr, res_out_ptr, g_ptr, m_rows[:, None] * sx + kk, m_rows[:, None] * sr + kk,
                             m_rows[:, None] * sro + kk, kk, mask, res_rows[:, None] & (kk < K), K,
                             PROLOGUE, HAS_RES, STORE_RES)
        else:
            kk = k[None, None, :]
            mask = (rows[:, None, None] < M) & (kk < K) & (zero_n == 0)
            w_off = zero_m + w_rows[None, :, None] + kk
            first_n = (tl.arange(0, BLOCK_N) == 0)[None, :, None]  # one copy of the repeated rows is stored
            xp, h = _x_prime(x_ptr, res_ptr, res_out_ptr, g_ptr, m_rows[:, None, None] * sx + zero_n + kk,
                             m_rows[:, None, None] * sr + zero_n + kk, m_rows[:, None, None] * sro + zero_n + kk,
                             zero_m + zero_n + kk, mask, res_rows[:, None, None] & first_n & (kk < K), K,
                             PROLOGUE, HAS_RES, STORE_RES)
        if EVEN_K:
            w = tl.load(w_ptr + w_off)
        else:
            w = tl.load(w_ptr + w_off, mask=kk < K, other=0.0)
        if PROLOGUE == 1:
            ss += h * h
        if DOT:
            acc += tl.dot(w, tl.trans(xp.to(w_ptr.dtype.element_ty)), input_precision=DOT_PRECISION)
        else:
            acc += w.to(tl.float32) * xp
    if DOT:
        y = tl.trans(acc)
    else:
        y = tl.sum(acc, axis=2)
    if PROLOGUE == 1:  # x' = h * g * rstd: the per-row rstd comes out of the sum
        if DOT:
            ss_rows = tl.sum(ss, axis=1)[:, None]
        else:
            ss_rows = tl.sum(ss, axis=2)  # [BLOCK_M, BLOCK_N], equal along N
        y = y * (1.0 / tl.sqrt(ss_rows / K + eps))
    if HAS_BIAS:
        y += tl.load(bias_ptr + n, mask=n < N, other=0.0).to(tl.float32)[None, :]
    out_mask = (rows[:, None] < M) & (n[None, :] < N)
    tl.store(out_ptr + m_rows[:, None] * so + n[None, :], y.to(out_ptr.dtype.element_ty), mask=out_mask)


def _check(x: torch.Tensor, weight: torch.Tensor, k: int, bias: Optional[torch.Tensor]) -> None:
    if x.dim() != 2 or x.stride(-1) != 1 or x.shape[0] > MAX_M:
        raise ValueError(f"x must be [M <= {MAX_M}, K] with unit last stride, got {tuple(x.shape)}")
    if weight.dim() != 2 or weight.shape[1] != k or weight.stride(1) != 1:
        raise ValueError(f"weight must be [N, {k}] with unit last stride, got {tuple(weight.shape)}")
    if weight.dtype != x.dtype:
        raise ValueError(f"x is {x.dtype} but weight is {weight.dtype}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")


def _launch(prologue: int, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
            out_dtype: Optional[torch.dtype], residual: Optional[torch.Tensor] = None,
            residual_out: Optional[torch.Tensor] = None, norm_weight: Optional[torch.Tensor] = None,
            eps: float = 0.0) -> torch.Tensor:
    m, (n, k) = x.shape[0], weight.shape
    out = torch.empty((m, n), dtype=out_dtype or x.dtype, device=x.device)
    if m == 0:
        return out
    cfg = config_for(n, k, m)
    block_m = max(16, next_power_of_2(m)) if cfg.dot else next_power_of_2(m)
    res = residual if residual is not None else x
    res_out = residual_out if residual_out is not None else res
    _gemv_kernel[(triton.cdiv(n, cfg.block_n),)](
        x, weight, bias if bias is not None else x, out, res, res_out, norm_weight if norm_weight is not None else x,
        m, n, k, x.stride(0), weight.stride(0), out.stride(0), res.stride(0), res_out.stride(0), eps,
        PROLOGUE=prologue, HAS_RES=residual is not None, STORE_RES=residual_out is not None,
        HAS_BIAS=bias is not None, DOT=cfg.dot, DOT_PRECISION="ieee" if weight.dtype == torch.float32 else "tf32",
        EVEN_K=k % cfg.block_k == 0, BLOCK_M=block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


def linear_gemv(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """`x @ weight.T (+ bias)` for x `[M <= 16, K]`, weight `[N, K]`; output in `out_dtype` (default x's)."""
    _check(x, weight, x.shape[1], bias)
    return _launch(PLAIN, x, weight, bias, out_dtype)


def rmsnorm_gemv(x: torch.Tensor, residual: Optional[torch.Tensor], norm_weight: torch.Tensor, eps: float,
                 weight: torch.Tensor, bias: Optional[torch.Tensor] = None, store_residual: bool = True,
                 out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """`(rmsnorm(h) * norm_weight) @ weight.T (+ bias)` and h, where `h = x + residual` (or x when residual
    is None). Returns `(y, h)`: h is a new tensor (None with `store_residual=False`), or x itself."""
    _check(x, weight, x.shape[1], bias)
    if residual is not None and (residual.shape != x.shape or residual.stride(-1) != 1):
        raise ValueError(f"residual must match x {tuple(x.shape)} with unit last stride, got {tuple(residual.shape)}")
    if norm_weight.shape != (x.shape[1],):
        raise ValueError(f"norm_weight must be [{x.shape[1]}], got {tuple(norm_weight.shape)}")
    residual_out = torch.empty_like(residual) if residual is not None and store_residual else None
    y = _launch(NORM, x, weight, bias, out_dtype, residual, residual_out, norm_weight, eps)
    return y, (x if residual is None else residual_out)


def silu_mul_gemv(gate_up: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                  out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """`(silu(gate_up[:, :K]) * gate_up[:, K:]) @ weight.T (+ bias)` for gate_up `[M <= 16, 2K]`, weight `[N, K]`."""
    if gate_up.dim() != 2 or gate_up.shape[1] % 2:
        raise ValueError(f"gate_up must be [M, 2 * K], got {tuple(gate_up.shape)}")
    _check(gate_up, weight, gate_up.shape[1] // 2, bias)
    return _launch(SILU_MUL, gate_up, weight, bias, out_dtype)
