// Small-batch bf16 GEMV for decode: y[m, n] = sum_k x[m, k] * w[n, k], m < M <= 8.
// Each warp owns ROWS consecutive rows of w and walks K in 16-byte chunks, UNROLL chunks of every row in
// flight per lane (loads that bypass L1: the weights are read once per step), x from L1; fp32
// accumulation, one warp-shuffle reduction per output. No split-K, so no second kernel.
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>
#include <torch/extension.h>

namespace {

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void unpack(const uint4& v, float2 (&f)[4]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = __bfloat1622float2(h[i]);
}

template <int MAXM, int ROWS, int UNROLL>
__global__ void gemv_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                            __nv_bfloat16* __restrict__ y, int m_rows, int n, int k, long ldx, long ldy) {
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * ROWS;
  if (row0 >= n) return;
  const int chunks = k >> 3;
  const uint4* w4 = reinterpret_cast<const uint4*>(w);
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  float acc[ROWS][MAXM];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < MAXM; ++m) acc[r][m] = 0.f;
  for (int c0 = lane; c0 < chunks; c0 += 32 * UNROLL) {
    uint4 wv[UNROLL][ROWS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int c = c0 + 32 * u;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int row = min(row0 + r, n - 1);
        wv[u][r] = c < chunks ? load_stream(w4 + (long)row * chunks + c) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int c = c0 + 32 * u;
      if (c >= chunks) break;
#pragma unroll
      for (int m = 0; m < MAXM; ++m) {
        if (m >= m_rows) break;
        float2 xf[4];
        unpack(__ldg(x4 + m * (ldx >> 3) + c), xf);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          float2 wf[4];
          unpack(wv[u][r], wf);
          float s = acc[r][m];
#pragma unroll
          for (int i = 0; i < 4; ++i) s = fmaf(wf[i].x, xf[i].x, fmaf(wf[i].y, xf[i].y, s));
          acc[r][m] = s;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < MAXM; ++m) {
      float v = acc[r][m];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      acc[r][m] = v;
    }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int m = 0; m < MAXM; ++m)
        if (m < m_rows && row0 + r < n) y[m * ldy + row0 + r] = __float2bfloat16(acc[r][m]);
  }
}

template <int MAXM, int ROWS, int UNROLL>
void launch(const torch::Tensor& x, const torch::Tensor& w, torch::Tensor& y, int warps) {
  const int m = x.size(0), n = w.size(0), k = w.size(1);
  const int rows_per_block = warps * ROWS;
  const dim3 grid((n + rows_per_block - 1) / rows_per_block);
  gemv_kernel<MAXM, ROWS, UNROLL><<<grid, warps * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(x.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(w.data_ptr()),
      reinterpret_cast<__nv_bfloat16*>(y.data_ptr()), m, n, k, x.stride(0), y.stride(0));
}

template <int ROWS, int UNROLL>
void dispatch_m(const torch::Tensor& x, const torch::Tensor& w, torch::Tensor& y, int warps) {
  const int m = x.size(0);
  if (m == 1) launch<1, ROWS, UNROLL>(x, w, y, warps);
  else if (m == 2) launch<2, ROWS, UNROLL>(x, w, y, warps);
  else if (m <= 4) launch<4, ROWS, UNROLL>(x, w, y, warps);
  else launch<8, ROWS, UNROLL>(x, w, y, warps);
}

}  // namespace

// config: 0 = (ROWS 2, UNROLL 2), 1 = (4, 2), 2 = (2, 4), 3 = (1, 4), 4 = (4, 1)
torch::Tensor gemv(torch::Tensor x, torch::Tensor w, int64_t config, int64_t warps) {
  TORCH_CHECK(x.is_cuda() && w.is_cuda(), "gemv: CUDA tensors expected");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16, "gemv: bfloat16 expected");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "gemv: shapes ", x.sizes(), " x ", w.sizes());
  TORCH_CHECK(x.size(0) >= 1 && x.size(0) <= 8, "gemv: 1 to 8 rows of x, got ", x.size(0));
  TORCH_CHECK(w.size(1) % 8 == 0 && x.stride(1) == 1 && w.stride(1) == 1 && w.stride(0) == w.size(1) &&
                  x.stride(0) % 8 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0,
              "gemv: 16-byte aligned rows with a unit last stride expected");
  auto y = torch::empty({x.size(0), w.size(0)}, x.options());
  const int nw = static_cast<int>(warps);
  switch (config) {
    case 0: dispatch_m<2, 2>(x, w, y, nw); break;
    case 1: dispatch_m<4, 2>(x, w, y, nw); break;
    case 2: dispatch_m<2, 4>(x, w, y, nw); break;
    case 3: dispatch_m<1, 4>(x, w, y, nw); break;
    case 4: dispatch_m<4, 1>(x, w, y, nw); break;
    default: TORCH_CHECK(false, "gemv: config 0-4, got ", config);
  }
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("gemv", &gemv, "small-batch bf16 GEMV (M <= 8)"); }
