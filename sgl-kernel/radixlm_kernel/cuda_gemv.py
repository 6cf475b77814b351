"""CUDA C++ small-batch bf16 GEMVs (`csrc/gemv_kernel.cuh`), built on first use with torch's JIT loader.

The entry points of the Triton ones in `gemv.py` (`linear_gemv`, `rmsnorm_gemv`, `silu_mul_gemv`), for
bf16 and 1-8 rows of x, plus `rmsnorm_gemv_silu_mul`: add + RMSNorm before gate_up and SiLU-and-mul after
it, in one kernel (the decode MLP's first half). Two kernels behind one set of launch configs: CUDA-core
FMAs (`CONFIGS`, gemv_kernel.cuh) and tensor cores (`MMA_CONFIGS`, gemv_mma.cuh: the weights go to
`mma.sync` as loaded, 16 rows x 8 columns of x per warp, K optionally split over the block's warps).
Triton's GEMVs could not keep enough weight loads in flight to beat cuBLAS at M <= 8; these issue 16-byte
streaming loads, `UNROLL` chunks per lane, and never split K across kernels, so the norm, the SiLU and
cuBLAS's split-K reduce stop being kernels of their own.
The norm is computed once per block into shared memory, with the rounding points of the unfused norm
kernel, so the matmul sees what the unfused path gives cuBLAS.

`load()` returns None (and remembers why) where there is no CUDA or no compiler, so callers fall back
to cuBLAS. A build is cached as one shared object named by a hash of the sources, torch, CUDA and the
GPU architecture, under `kernels/` of radixlm's cache folder (`$RADIXLM_CACHE_DIR`, default
`~/.cache/radixlm`, the same variable `radixlm.environ` reads; this package cannot import radixlm): a later
process loads it without compiling.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from types import ModuleType
from typing import Optional

import torch

from radixlm_kernel import environ
from radixlm_kernel.utils import pdl_on_gpu

CSRC = os.path.join(os.path.dirname(__file__), "csrc")
SOURCES = [os.path.join(CSRC, name) for name in
           ("gemv_binding.cpp", "gemv_plain.cu", "gemv_norm.cu", "gemv_norm_silu.cu")]
HEADERS = [os.path.join(CSRC, name) for name in ("gemv.h", "gemv_kernel.cuh", "gemv_mma.cuh", "gemv_launch.cuh")]
# CUDA cores: id -> (ROWS, UNROLL), as gemv_kernel.cuh
CONFIGS = {0: (2, 2), 1: (4, 2), 2: (2, 4), 3: (1, 4), 4: (4, 1)}
# tensor cores (mma.sync): id -> (warps splitting one 16-row tile's K, at most the block's; UNROLL), as gemv_mma.cuh
MMA_CONFIGS = {5: (1, 4), 6: (2, 4), 7: (4, 4), 8: (8, 4), 9: (4, 2), 10: (8, 2)}
ALL_CONFIGS = {**CONFIGS, **MMA_CONFIGS}
WARPS = (1, 2, 4, 8)
MAX_M = 8
PLAIN, NORM, NORM_SILU_MUL = 0, 1, 2  # the kernel variants, as gemv.h numbers them

# (config, warps) per (N, K, M bucket): the best of `benchmark/gpu_cuda_gemv.py` on an H200 for the
# Llama-3.1-8B projections (M = 1: ninth session; M >= 2, CUDA-core and tensor-core configs together:
# sixteenth session, RESULTS.md); DEFAULT elsewhere. At M >= 2 even the best loses to cuBLAS plus the
# separate norm / SiLU kernels on every projection but o_proj (the per-block norm prologue and, on CUDA
# cores, the FMAs), and the decode graph at bs 2-8 gets slower; at M = 1, launched with PDL (below), the
# bs-1 step beats cuBLAS, so radixlm gives them single-token batches only by default.
DEFAULT = (0, 8)
LAUNCH: dict[tuple[int, int, int], tuple[int, int]] = {
    (4096, 4096, 1): (0, 8), (4096, 4096, 2): (10, 8), (4096, 4096, 4): (10, 8), (4096, 4096, 8): (10, 8),
    (4096, 14336, 1): (0, 8), (4096, 14336, 2): (8, 8), (4096, 14336, 4): (8, 8), (4096, 14336, 8): (10, 8),
    (6144, 4096, 1): (0, 8), (6144, 4096, 2): (2, 8), (6144, 4096, 4): (9, 8), (6144, 4096, 8): (9, 8),
    (28672, 4096, 1): (0, 8), (28672, 4096, 2): (6, 8), (28672, 4096, 4): (5, 8), (28672, 4096, 8): (5, 8),
    (128256, 4096, 1): (0, 8), (128256, 4096, 2): (5, 8), (128256, 4096, 4): (5, 8), (128256, 4096, 8): (5, 8),
}

_ext: Optional[ModuleType] = None
load_error: Optional[str] = None


PDL_LAUNCH, PDL_TRIGGER, PDL_TRIGGER_LATE = 1, 2, 4  # gemv.h's PdlBits
# Measured in the bs-1 Llama-3.1-8B decode graph on an H200 (RESULTS.md, fifteenth session; GEMVs at M = 1),
# ms: call 2, no PDL at all 4.477, 1 4.409, 2 4.482, 3 4.525, cuBLAS 4.547; call 3, 1 4.410, 4 4.428, 5 4.381,
# cuBLAS 4.547. Releasing the next kernel right after the wait (2, 3) lets the next GEMV's blocks take SMs
# and bandwidth the running one still needs.
DEFAULT_PDL = PDL_LAUNCH | PDL_TRIGGER_LATE


def pdl_bits(x: torch.Tensor) -> int:
    """How the GEMV uses programmatic dependent launch where the GPU has it (`utils.pdl_on_gpu`):
    RADIXLM_CUDA_GEMV_PDL is a sum of PDL_LAUNCH (1: launched with it, it starts early and loads weights
    while the kernel before it ends), PDL_TRIGGER (2: it lets the next kernel start as soon as its own wait
    is over) and PDL_TRIGGER_LATE (4: once its weights are read); 0 is off."""
    if not pdl_on_gpu(x):
        return 0
    return environ.cuda_gemv_pdl(DEFAULT_PDL)


def build_key(arch: str) -> str:
    digest = hashlib.sha256()
    for path in SOURCES + HEADERS:
        with open(path, "rb") as f:
            digest.update(f.read())
    digest.update(f"{torch.__version__}|{torch.version.cuda}|{arch}".encode())
    return digest.hexdigest()[:16]


def _import_so(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(name: str, arch: str, target: str) -> ModuleType:
    from torch.utils.cpp_extension import load as load_extension

    with tempfile.TemporaryDirectory(prefix="radixlm_gemv_") as build_dir:
        module = load_extension(name=name, sources=SOURCES, build_directory=build_dir, verbose=False,
                                extra_cuda_cflags=["-O3", arch], extra_include_paths=[CSRC])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        staged = f"{target}.{os.getpid()}.tmp"
        shutil.copyfile(module.__file__, staged)
        os.replace(staged, target)  # atomic: concurrent ranks may build at once
    return module


def load() -> Optional[ModuleType]:
    """The built extension, or None where it cannot be built (`load_error` says why)."""
    global _ext, load_error
    if _ext is not None or load_error is not None:
        return _ext
    if not torch.cuda.is_available():
        load_error = "no CUDA device"
        return None
    try:
        major, minor = torch.cuda.get_device_capability()
        arch = f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"
        name = f"radixlm_gemv_{build_key(arch)}"
        target = os.path.join(environ.kernel_cache_dir(), f"{name}.so")
        _ext = _import_so(name, target) if os.path.exists(target) else _build(name, arch, target)
    except Exception as e:  # noqa: BLE001 - no nvcc / ninja: the caller falls back to cuBLAS
        load_error = f"{type(e).__name__}: {e}"
    return _ext


def supports(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether these kernels take `x @ weight.T` (else the caller keeps its other path)."""
    return (x.is_cuda and x.dtype == torch.bfloat16 and weight.dtype == torch.bfloat16 and x.dim() == 2
            and 1 <= x.shape[0] <= MAX_M and x.stride(1) == 1 and x.stride(0) % 8 == 0 and x.data_ptr() % 16 == 0
            and weight.dim() == 2 and weight.is_contiguous() and weight.data_ptr() % 16 == 0
            and weight.shape[1] % 8 == 0)


def launch_config(n: int, k: int, m: int) -> tuple[int, int]:
    bucket = 1 if m <= 1 else 2 if m == 2 else 4 if m <= 4 else 8
    return LAUNCH.get((n, k, bucket), DEFAULT)


def _check_tensor(name: str, t: torch.Tensor, dim: int, vector_loads: bool = True) -> None:
    """`vector_loads`: the kernel reads it 16 bytes at a time (the bias is read one element at a time)."""
    if not t.is_cuda or t.dtype != torch.bfloat16 or t.dim() != dim:
        raise ValueError(f"{name} must be a {dim}-D bfloat16 CUDA tensor, got {t.dtype} {tuple(t.shape)} on {t.device}")
    if not vector_loads:
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have a unit last stride")
        return
    if t.stride(-1) != 1 or t.data_ptr() % 16 or (dim == 2 and t.stride(0) % 8):
        raise ValueError(f"{name} must have a unit last stride, rows a multiple of 8 elements apart and a 16-byte "
                         f"aligned start")


def check_inputs(x: torch.Tensor, w: torch.Tensor, k: int, config: int, warps: int) -> None:
    """ValueError naming the parameter for what the kernel cannot take. Checked here, not in the extension:
    on the H200 image an exception thrown inside the JIT-built module crashed the process (a segfault in the
    sixth session's device run) instead of reaching Python."""
    _check_tensor("x", x, 2)
    _check_tensor("w", w, 2)
    if not 1 <= x.shape[0] <= MAX_M:
        raise ValueError(f"x must have 1 to {MAX_M} rows, got {x.shape[0]}")
    if w.shape[1] != k or k % 8 or not w.is_contiguous():
        raise ValueError(f"x {tuple(x.shape)} and w {tuple(w.shape)} need one K, a multiple of 8 (w contiguous)")
    if config not in ALL_CONFIGS:
        raise ValueError(f"config must be one of {sorted(ALL_CONFIGS)}, got {config}")
    if warps not in WARPS:
        raise ValueError(f"warps must be one of {WARPS}, got {warps}")


def _run(prologue: int, x: torch.Tensor, w: torch.Tensor, k: int, bias: Optional[torch.Tensor],
         out_dtype: Optional[torch.dtype], residual: Optional[torch.Tensor] = None,
         residual_out: Optional[torch.Tensor] = None, norm_weight: Optional[torch.Tensor] = None, eps: float = 0.0,
         config: Optional[int] = None, warps: Optional[int] = None, out_cols: Optional[int] = None) -> torch.Tensor:
    ext = load()
    if ext is None:
        raise RuntimeError(f"the CUDA GEMV extension is unavailable: {load_error}")
    default_config, default_warps = launch_config(w.shape[0], k, x.shape[0])
    config = default_config if config is None else config
    warps = default_warps if warps is None else warps
    check_inputs(x, w, k, config, warps)
    if bias is not None:
        _check_tensor("bias", bias, 1, vector_loads=False)
        if bias.shape != (w.shape[0],):
            raise ValueError(f"bias must be [{w.shape[0]}], got {tuple(bias.shape)}")
    out_dtype = out_dtype or torch.bfloat16
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"out_dtype must be bfloat16 or float32, got {out_dtype}")
    y = torch.empty((x.shape[0], out_cols or w.shape[0]), dtype=out_dtype, device=x.device)
    err = ext.fused_gemv(y, x, w, residual, residual_out, norm_weight, bias, prologue, eps, config, warps,
                         pdl_bits(x))
    if err:
        raise RuntimeError(f"the CUDA GEMV launch failed with cudaError_t {err}")
    return y


def gemv(x: torch.Tensor, w: torch.Tensor, config: Optional[int] = None, warps: Optional[int] = None) -> torch.Tensor:
    """`x @ w.T` for bf16 `x [M <= 8, K]`, `w [N, K]`, optionally with an explicit launch config (benchmarks,
    tests); by default the `LAUNCH` table's."""
    return _run(PLAIN, x, w, x.shape[1] if x.dim() == 2 else -1, None, None, config=config, warps=warps)


def linear_gemv(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """`x @ weight.T (+ bias)` for bf16 x `[M <= 8, K]`; output bf16 or float32."""
    return _run(PLAIN, x, weight, x.shape[1], bias, out_dtype)


def _check_norm_inputs(x: torch.Tensor, residual: Optional[torch.Tensor], norm_weight: torch.Tensor) -> None:
    _check_tensor("x", x, 2)
    if residual is not None:
        _check_tensor("residual", residual, 2)
        if residual.shape != x.shape:
            raise ValueError(f"residual must match x {tuple(x.shape)}, got {tuple(residual.shape)}")
    _check_tensor("norm_weight", norm_weight, 1)
    if norm_weight.shape != (x.shape[1],):
        raise ValueError(f"norm_weight must be [{x.shape[1]}], got {tuple(norm_weight.shape)}")


def rmsnorm_gemv(x: torch.Tensor, residual: Optional[torch.Tensor], norm_weight: torch.Tensor, eps: float,
                 weight: torch.Tensor, bias: Optional[torch.Tensor] = None, store_residual: bool = True,
                 out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """`(rmsnorm(h) * norm_weight) @ weight.T (+ bias)` and h, where `h = x + residual` (or x when residual is
    None). Returns `(y, h)`: h is a new tensor (None with `store_residual=False`), or x itself."""
    _check_norm_inputs(x, residual, norm_weight)
    residual_out = torch.empty_like(residual) if residual is not None and store_residual else None
    y = _run(NORM, x, weight, x.shape[1], bias, out_dtype, residual, residual_out, norm_weight, eps)
    return y, (x if residual is None else residual_out)


def silu_mul_gemv(gate_up: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                  out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """`(silu(gate_up[:, :K]) * gate_up[:, K:]) @ weight.T (+ bias)` for gate_up `[M <= 8, 2K]`, weight `[N, K]`:
    the SiLU kernel, then the plain GEMV (the decode MLP folds SiLU into gate_up instead:
    `rmsnorm_gemv_silu_mul`)."""
    from radixlm_kernel.activation import silu_and_mul

    _check_tensor("gate_up", gate_up, 2)
    if gate_up.shape[1] % 16:
        raise ValueError(f"gate_up must be [M, 2 * K] with K a multiple of 8, got {tuple(gate_up.shape)}")
    return linear_gemv(silu_and_mul(gate_up), weight, bias, out_dtype)


def rmsnorm_gemv_silu_mul(x: torch.Tensor, residual: Optional[torch.Tensor], norm_weight: torch.Tensor, eps: float,
                          weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                          out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`(silu(gate) * up, h)` where `[gate | up] = (rmsnorm(h) * norm_weight) @ weight.T (+ bias)`, weight
    `[2 * I, K]` (gate rows then up rows), `h = x + residual` (or x): `[M, I]` and the new residual."""
    _check_norm_inputs(x, residual, norm_weight)
    if weight.dim() != 2 or weight.shape[0] % 2:
        raise ValueError(f"weight must be [2 * I, K] (gate rows, then up rows), got {tuple(weight.shape)}")
    residual_out = torch.empty_like(residual) if residual is not None else None
    gate_up_rows = weight.shape[0]
    y = _run(NORM_SILU_MUL, x, weight, x.shape[1], bias, out_dtype, residual, residual_out, norm_weight, eps,
             out_cols=gate_up_rows // 2)
    return y, (x if residual is None else residual_out)
