// The host-side interface of the small-batch GEMV (gemv_kernel.cuh and gemv_mma.cuh hold the kernels): the launch
// arguments and one launcher per variant, each in its own .cu file so that they compile in parallel.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace radixlm_gemv {

// PLAIN: x' = x, read by every warp (through L1).  NORM: x' = rmsnorm(x + residual) * g, computed once per
// block into shared memory.  SILU_PAIR (with NORM): rows p and p + N/2 of w (gate and up) go to one warp,
// which writes silu(gate) * up to output column p, so y has N/2 columns.
enum Variant { PLAIN = 0, NORM = 1, NORM_SILU = 2 };
// GemvArgs.pdl bits (programmatic dependent launch, sm90+; gemv_kernel.cuh)
enum PdlBits { PDL_LAUNCH = 1, PDL_TRIGGER = 2, PDL_TRIGGER_LATE = 4 };
// launch config ids from here on run on tensor cores (gemv_mma.cuh); below, on CUDA cores (gemv_kernel.cuh)
constexpr int MMA_FIRST_CONFIG = 5;

struct GemvArgs {
  const __nv_bfloat16* x;     // [m, ldx], K columns
  const __nv_bfloat16* res;   // NORM: [m, ldr] residual or null
  __nv_bfloat16* res_out;     // NORM: [m, ldro] where h = x + residual goes (block 0 writes it), or null
  const __nv_bfloat16* g;     // NORM: [K] norm weight
  const __nv_bfloat16* w;     // [n, K] row-major
  const __nv_bfloat16* bias;  // [n] or null
  void* y;                    // [m, ldy], bf16 or fp32
  long ldx, ldr, ldro, ldy;
  int y_f32, m, n, k;
  int pdl;  // PdlBits
  float eps;
};

cudaError_t launch_plain(const GemvArgs& a, int config, int warps, cudaStream_t stream);
cudaError_t launch_norm(const GemvArgs& a, int config, int warps, cudaStream_t stream);
cudaError_t launch_norm_silu(const GemvArgs& a, int config, int warps, cudaStream_t stream);

}  // namespace radixlm_gemv
