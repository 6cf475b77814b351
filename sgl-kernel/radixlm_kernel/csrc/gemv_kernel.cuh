// Small-batch bf16 GEMV for decode (M <= 8 rows of x) with the op before and after the matmul folded in:
//   y[m, n] = sum_k x'[m, k] * w[n, k] (+ bias[n])
//   PLAIN: x' = x.  NORM: h = x + residual (rounded to bf16, as fused_add_rmsnorm stores it) or x, and
//   x' = round(round(h * rsqrt(mean(h**2) + eps)) * g), the rounding points of the unfused norm kernel, so
//   the GEMV sees exactly what the unfused path would give cuBLAS. Each block computes x' for all of K
//   into shared memory first (after issuing its first weight loads, so HBM is busy meanwhile).
//   NORM_SILU: as NORM, with gate row p and up row p + N/2 in one warp: y[m, p] = silu(gate) * up, each
//   rounded to bf16 first as the unfused gate_up output and silu_and_mul would be.
// Each warp owns ROWS rows of w and walks K in 16-byte chunks, UNROLL chunks of every row in flight per
// lane (streaming loads that bypass L1); each weight chunk is converted once for all rows of x; fp32
// accumulation, one warp-shuffle reduction per output. No split-K, so no second kernel.
#pragma once
#include <stdint.h>

#include <utility>

#include "gemv.h"

namespace radixlm_gemv {

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

// Programmatic dependent launch (sm90+). a.pdl & PDL_LAUNCH: launched with it, so the block may start
// while the kernel before it ends; it has issued its first weight loads (no kernel writes weights) and
// waits here until that kernel has completed and its writes are visible (without the attribute the wait
// is a no-op). a.pdl & PDL_TRIGGER: only then lets the next kernel start, so stream order holds for every
// read of x, the residual and the output; PDL_TRIGGER_LATE: lets it start once the weights are read (before
// the reductions and stores); without either the next kernel starts when this one has completed.
__device__ __forceinline__ void pdl_wait_then_trigger(int pdl) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (pdl & PDL_TRIGGER) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// PDL_TRIGGER_LATE (and not PDL_TRIGGER, which released the next kernel already): let it start now
__device__ __forceinline__ void pdl_trigger_late(int pdl) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if ((pdl & PDL_TRIGGER_LATE) && !(pdl & PDL_TRIGGER)) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// x' of every row of x into xs ([m][stride] 16-byte chunks, shared; stride >= K / 8): h and its sum of
// squares in one pass (block 0 also stores h as the new residual), a block reduction, then the normalised
// row over h in place.
template <int MAXM>
__device__ __forceinline__ void norm_prologue(const GemvArgs& a, uint4* xs, int stride) {
  __shared__ float partial[MAXM][32];
  __shared__ float rstd[MAXM];
  const int chunks = a.k >> 3, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const bool store_res = a.res_out != nullptr && blockIdx.x == 0;
  float ss[MAXM];
#pragma unroll
  for (int m = 0; m < MAXM; ++m) ss[m] = 0.f;
  constexpr int BATCH = MAXM < 4 ? MAXM : 4;  // rows whose loads are in flight at once (registers)
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
#pragma unroll
    for (int m0 = 0; m0 < MAXM; m0 += BATCH) {
      if (m0 >= a.m) break;
      uint4 xv[BATCH], rv[BATCH];
#pragma unroll
      for (int j = 0; j < BATCH; ++j) {
        if (m0 + j < a.m) {
          xv[j] = __ldg(reinterpret_cast<const uint4*>(a.x + (m0 + j) * a.ldx) + c);
          if (a.res != nullptr) rv[j] = __ldg(reinterpret_cast<const uint4*>(a.res + (m0 + j) * a.ldr) + c);
        }
      }
#pragma unroll
      for (int j = 0; j < BATCH; ++j) {
        const int m = m0 + j;
        if (m >= a.m) break;
        float h[8];
        unpack8(xv[j], h);
        if (a.res != nullptr) {
          float r[8];
          unpack8(rv[j], r);
#pragma unroll
          for (int i = 0; i < 8; ++i) h[i] = round_bf16(h[i] + r[i]);
        }
        const uint4 hv = pack8(h);
        xs[m * stride + c] = hv;
        if (store_res) reinterpret_cast<uint4*>(a.res_out + m * a.ldro)[c] = hv;
#pragma unroll
        for (int i = 0; i < 8; ++i) ss[m] = fmaf(h[i], h[i], ss[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MAXM; ++m) {
    if (m >= a.m) break;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss[m] += __shfl_xor_sync(0xffffffffu, ss[m], off);
    if (lane == 0) partial[m][warp] = ss[m];
  }
  __syncthreads();
  if (threadIdx.x < MAXM && threadIdx.x < a.m) {
    float ss = 0.f;
    for (int w = 0; w < nwarps; ++w) ss += partial[threadIdx.x][w];
    rstd[threadIdx.x] = rsqrtf(ss / a.k + a.eps);
  }
  __syncthreads();
  const uint4* g4 = reinterpret_cast<const uint4*>(a.g);
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    float g[8];
    unpack8(__ldg(g4 + c), g);
#pragma unroll
    for (int m = 0; m < MAXM; ++m) {
      if (m >= a.m) break;
      float h[8];
      unpack8(xs[m * stride + c], h);
#pragma unroll
      for (int i = 0; i < 8; ++i) h[i] = round_bf16(round_bf16(h[i] * rstd[m]) * g[i]);
      xs[m * stride + c] = pack8(h);
    }
  }
  __syncthreads();
}

template <int MAXM, int ROWS, int UNROLL, int VAR>
__global__ void __launch_bounds__(256) gemv_kernel(const GemvArgs a) {
  extern __shared__ uint4 xs[];  // NORM: x' [m][K / 8]
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  // NORM_SILU: ROWS / 2 gate rows from p0 and the up rows N / 2 further; else ROWS rows from row0
  constexpr int OUT_ROWS = VAR == NORM_SILU ? ROWS / 2 : ROWS;
  const int n_out = VAR == NORM_SILU ? a.n / 2 : a.n;
  const int row0 = warp * OUT_ROWS;
  const int chunks = a.k >> 3;
  const uint4* w4 = reinterpret_cast<const uint4*>(a.w);
  long wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int out_row = min(row0 + r % OUT_ROWS, n_out - 1);
    wrow[r] = static_cast<long>(VAR == NORM_SILU && r >= OUT_ROWS ? out_row + n_out : out_row) * chunks;
  }
  float acc[ROWS][MAXM];
#pragma unroll
  for (int m = 0; m < MAXM; ++m)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r][m] = 0.f;
  uint4 wv[UNROLL][ROWS];
  const bool active = row0 < n_out;  // warps past the end still help with the block's prologue
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int c = lane + 32 * u;
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
      wv[u][r] = active && c < chunks ? load_stream(w4 + wrow[r] + c) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait_then_trigger(a.pdl);  // before the first read of anything an earlier kernel wrote
  if constexpr (VAR != PLAIN) norm_prologue<MAXM>(a, xs, chunks);
  if (!active) return;
  for (int c0 = lane; c0 < chunks; c0 += 32 * UNROLL) {
    if (c0 != lane) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int c = c0 + 32 * u;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) wv[u][r] = c < chunks ? load_stream(w4 + wrow[r] + c) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int c = c0 + 32 * u;
      if (c >= chunks) break;
      float wf[ROWS][8];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) unpack8(wv[u][r], wf[r]);
#pragma unroll
      for (int m = 0; m < MAXM; ++m) {
        if (m >= a.m) break;
        float xp[8];
        if constexpr (VAR == PLAIN) unpack8(__ldg(reinterpret_cast<const uint4*>(a.x + m * a.ldx) + c), xp);
        else unpack8(xs[m * chunks + c], xp);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          float s = acc[r][m];
#pragma unroll
          for (int i = 0; i < 8; ++i) s = fmaf(wf[r][i], xp[i], s);
          acc[r][m] = s;
        }
      }
    }
  }
  pdl_trigger_late(a.pdl);  // the weights are read
#pragma unroll
  for (int m = 0; m < MAXM; ++m)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], off);
  if (lane != 0) return;
#pragma unroll
  for (int m = 0; m < MAXM; ++m) {
    if (m >= a.m) break;
#pragma unroll
    for (int r = 0; r < OUT_ROWS; ++r) {
      const int row = row0 + r;
      if (row >= n_out) break;
      float v = acc[r][m];
      if (a.bias != nullptr) v += __bfloat162float(a.bias[row]);
      if constexpr (VAR == NORM_SILU) {
        float up = acc[r + OUT_ROWS][m];
        if (a.bias != nullptr) up += __bfloat162float(a.bias[row + n_out]);
        const float gate = round_bf16(v);
        v = gate / (1.f + __expf(-gate)) * round_bf16(up);
      }
      if (a.y_f32) reinterpret_cast<float*>(a.y)[m * a.ldy + row] = v;
      else reinterpret_cast<__nv_bfloat16*>(a.y)[m * a.ldy + row] = __float2bfloat16(v);
    }
  }
}

// One launch with the dynamic shared memory it needs and, with PDL_LAUNCH, programmatic stream serialization
template <typename... KArgs, typename... Args>
cudaError_t launch_ex(void (*kernel)(KArgs...), dim3 grid, int threads, size_t smem, cudaStream_t stream, int pdl,
                      Args&&... args) {
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = (pdl & PDL_LAUNCH) ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <int MAXM, int ROWS, int UNROLL, int VAR>
cudaError_t launch_cfg(const GemvArgs& a, int warps, cudaStream_t stream) {
  constexpr int OUT_ROWS = VAR == NORM_SILU ? ROWS / 2 : ROWS;
  const int n_out = VAR == NORM_SILU ? a.n / 2 : a.n;
  const int per_block = warps * OUT_ROWS;
  const size_t smem = VAR == PLAIN ? 0 : static_cast<size_t>(a.m) * a.k * sizeof(__nv_bfloat16);
  return launch_ex(gemv_kernel<MAXM, ROWS, UNROLL, VAR>, dim3((n_out + per_block - 1) / per_block), warps * 32,
                   smem, stream, a.pdl, a);
}

// config id -> (ROWS, UNROLL); the Python side (cuda_gemv.CONFIGS) keeps the same table. NORM_SILU pairs
// rows, so its ROWS count gate and up rows together.
template <int MAXM, int VAR>
cudaError_t launch_m(const GemvArgs& a, int config, int warps, cudaStream_t stream) {
  switch (config) {
    case 0: return launch_cfg<MAXM, 2, 2, VAR>(a, warps, stream);
    case 1: return launch_cfg<MAXM, 4, 2, VAR>(a, warps, stream);
    case 2: return launch_cfg<MAXM, 2, 4, VAR>(a, warps, stream);
    case 3: return launch_cfg<MAXM, VAR == NORM_SILU ? 2 : 1, 4, VAR>(a, warps, stream);
    case 4: return launch_cfg<MAXM, 4, 1, VAR>(a, warps, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace radixlm_gemv
