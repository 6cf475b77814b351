// The small-batch GEMV on tensor cores (2 <= M <= 8 rows of x; gemv.h's variants, the same rounding points
// as gemv_kernel.cuh). The CUDA-core kernel converts every weight to fp32 and spends M FMAs on it, which
// at M = 8 no longer keeps up with HBM; here the weights go to `mma.sync.m16n8k16` as they were loaded.
//
// A warp owns a tile of 16 weight rows (NORM_SILU: 8 gate rows and their 8 up rows) and the 8 columns of
// x^T (rows of x past M are zero), and walks its share of K in groups of 32: lane (g, c) = (lane / 4,
// lane % 4) loads 16 bytes of rows g and g + 8 at k = 32 * group + 8 * c, and 16 bytes of x row g at the
// same k. The order of k inside one mma is free (the sum does not depend on it), so the lane's 8 values
// are the k slots {2c, 2c+1, 2c+8, 2c+9} of two mmas, which is exactly where the A fragment (rows g,
// g + 8) and the B fragment (column g) put them: no shuffle, no conversion. KS warps of a block split K
// of one tile and add their accumulators through shared memory; the accumulator of lane (g, c) holds
// rows g and g + 8 for columns (tokens) 2c and 2c + 1, so NORM_SILU has gate and up in one lane.
#pragma once
#include "gemv_kernel.cuh"

namespace radixlm_gemv {

constexpr int MMA_TILE_ROWS = 16;

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// 32 values of k for 16 rows x 8 columns: the lane's weights of rows g (lo) and g + 8 (hi), its x chunk
__device__ __forceinline__ void mma_group(float (&d)[4], const uint4& lo, const uint4& hi, const uint4& xv) {
  mma_bf16(d, lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);
  mma_bf16(d, lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);
}

// UNROLL groups from `first` on (past `end`, or past K for the lane's chunk: zeros) of rows g and g + 8
template <int UNROLL>
__device__ __forceinline__ void load_groups(uint4 (&lo)[UNROLL], uint4 (&hi)[UNROLL], const uint4* wlo,
                                            const uint4* whi, int first, int end, int chunks, int c) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int grp = first + u;
    const bool ok = grp < end && 4 * grp + c < chunks;
    lo[u] = ok ? load_stream(wlo + 4 * grp) : make_uint4(0, 0, 0, 0);
    hi[u] = ok ? load_stream(whi + 4 * grp) : make_uint4(0, 0, 0, 0);
  }
}

// the loaded groups times the lane's x chunks, alternating between the two accumulators
template <int UNROLL, int VAR>
__device__ __forceinline__ void mma_groups(float (&d)[2][4], const uint4 (&lo)[UNROLL], const uint4 (&hi)[UNROLL],
                                           const uint4* xrow, int first, int end, int chunks, int c, bool has_x) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int grp = first + u;
    if (grp >= end) break;
    const bool ok = has_x && 4 * grp + c < chunks;
    const uint4 xv = !ok ? make_uint4(0, 0, 0, 0) : VAR == PLAIN ? __ldg(xrow + 4 * grp) : xrow[4 * grp];
    mma_group(d[u & 1], lo[u], hi[u], xv);
  }
}

// shared-memory row stride of x' in 16-byte chunks: = 4 (mod 8), so the lanes reading rows g and g + 1 of
// one group hit different banks
__host__ __device__ __forceinline__ int mma_x_stride(int chunks) { return chunks + (12 - chunks % 8) % 8; }

template <int VAR>
__device__ __forceinline__ void mma_store(const GemvArgs& a, const float (&d)[4], int out0, int g, int c) {
  const int n_out = VAR == NORM_SILU ? a.n / 2 : a.n;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int m = 2 * c + j;
    if (m >= a.m) break;
#pragma unroll
    for (int h = 0; h < (VAR == NORM_SILU ? 1 : 2); ++h) {
      const int row = out0 + g + 8 * h;
      if (row >= n_out) break;
      float v = d[2 * h + j];
      if (a.bias != nullptr) v += __bfloat162float(a.bias[row]);
      if constexpr (VAR == NORM_SILU) {
        float up = d[2 + j];
        if (a.bias != nullptr) up += __bfloat162float(a.bias[row + n_out]);
        const float gate = round_bf16(v);
        v = gate / (1.f + __expf(-gate)) * round_bf16(up);
      }
      if (a.y_f32) reinterpret_cast<float*>(a.y)[m * a.ldy + row] = v;
      else reinterpret_cast<__nv_bfloat16*>(a.y)[m * a.ldy + row] = __float2bfloat16(v);
    }
  }
}

// blockDim.x / 32 = tiles per block * ks warps; ks divides the block's warps (the launcher makes sure)
template <int UNROLL, int VAR>
__global__ void __launch_bounds__(256, 2) gemv_mma_kernel(const GemvArgs a, const int ks) {
  extern __shared__ uint4 xs[];  // NORM: x' [m][mma_x_stride(K / 8)]
  __shared__ float4 partial[8][32];
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int tile = blockIdx.x * ((blockDim.x >> 5) / ks) + wib / ks, part = wib % ks;
  constexpr int TILE_OUT = VAR == NORM_SILU ? MMA_TILE_ROWS / 2 : MMA_TILE_ROWS;
  const int n_out = VAR == NORM_SILU ? a.n / 2 : a.n;
  const int out0 = tile * TILE_OUT;
  const bool active = out0 < n_out;  // warps past the end still help with the prologue and the barriers
  const int chunks = a.k >> 3, groups = (chunks + 3) >> 2;
  const int per_part = (groups + ks - 1) / ks;
  const int gbeg = part * per_part, gend = min(groups, gbeg + per_part);
  const long lo_row = min(out0 + g, n_out - 1);
  const long hi_row = VAR == NORM_SILU ? lo_row + n_out : min(out0 + g + 8, n_out - 1);
  const uint4* wlo = reinterpret_cast<const uint4*>(a.w) + lo_row * chunks + c;
  const uint4* whi = reinterpret_cast<const uint4*>(a.w) + hi_row * chunks + c;
  uint4 lo[2][UNROLL], hi[2][UNROLL];  // two stages: the next UNROLL groups load while these multiply
  load_groups<UNROLL>(lo[0], hi[0], wlo, whi, gbeg, active ? gend : gbeg, chunks, c);
  pdl_wait_then_trigger(a.pdl);  // before the first read of anything an earlier kernel wrote
  const int stride = mma_x_stride(chunks);
  if constexpr (VAR != PLAIN) norm_prologue<8>(a, xs, stride);
  const uint4* xrow = VAR == PLAIN ? reinterpret_cast<const uint4*>(a.x + g * a.ldx) + c : xs + g * stride + c;
  const bool has_x = g < a.m;
  float d[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};  // two chains of mmas, added at the end
  for (int base = gbeg; active && base < gend; base += 2 * UNROLL) {
    load_groups<UNROLL>(lo[1], hi[1], wlo, whi, base + UNROLL, gend, chunks, c);
    mma_groups<UNROLL, VAR>(d, lo[0], hi[0], xrow, base, gend, chunks, c, has_x);
    load_groups<UNROLL>(lo[0], hi[0], wlo, whi, base + 2 * UNROLL, gend, chunks, c);
    mma_groups<UNROLL, VAR>(d, lo[1], hi[1], xrow, base + UNROLL, gend, chunks, c, has_x);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) d[0][i] += d[1][i];
  pdl_trigger_late(a.pdl);  // the weights are read
  if (ks > 1) {
    if (part != 0) partial[wib][lane] = make_float4(d[0][0], d[0][1], d[0][2], d[0][3]);
    __syncthreads();
    if (part != 0) return;
    for (int j = 1; j < ks; ++j) {
      const float4 p = partial[wib + j][lane];
      d[0][0] += p.x, d[0][1] += p.y, d[0][2] += p.z, d[0][3] += p.w;
    }
  }
  if (active) mma_store<VAR>(a, d[0], out0, g, c);
}

// config -> (ks, UNROLL) as cuda_gemv.MMA_CONFIGS: ks warps split the K of one tile (at most the block's
// warps), UNROLL groups of 32 k in flight per lane
template <int VAR>
cudaError_t launch_mma(const GemvArgs& a, int config, int warps, cudaStream_t stream) {
  static constexpr int KS[] = {1, 2, 4, 8, 4, 8}, UNROLLS[] = {4, 4, 4, 4, 2, 2};
  const int idx = config - MMA_FIRST_CONFIG;
  if (idx < 0 || idx >= 6 || warps < 1 || warps > 8) return cudaErrorInvalidValue;
  const int ks = min(KS[idx], warps);
  const int tiles_per_block = warps / ks;
  const int n_out = VAR == NORM_SILU ? a.n / 2 : a.n;
  const int tile_out = VAR == NORM_SILU ? MMA_TILE_ROWS / 2 : MMA_TILE_ROWS;
  const int tiles = (n_out + tile_out - 1) / tile_out;
  const dim3 grid((tiles + tiles_per_block - 1) / tiles_per_block);
  const size_t smem = VAR == PLAIN ? 0 : static_cast<size_t>(a.m) * mma_x_stride(a.k >> 3) * sizeof(uint4);
  const int threads = tiles_per_block * ks * 32;
  if (UNROLLS[idx] == 4) return launch_ex(gemv_mma_kernel<4, VAR>, grid, threads, smem, stream, a.pdl, a, ks);
  return launch_ex(gemv_mma_kernel<2, VAR>, grid, threads, smem, stream, a.pdl, a, ks);
}

}  // namespace radixlm_gemv
