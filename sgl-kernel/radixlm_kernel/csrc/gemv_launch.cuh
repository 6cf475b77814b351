// The launcher of every small-batch GEMV config: ids below MMA_FIRST_CONFIG are the CUDA-core kernel
// (gemv_kernel.cuh, instantiated per bucket of M), the rest the tensor-core one (gemv_mma.cuh).
#pragma once
#include "gemv_mma.cuh"

namespace radixlm_gemv {

template <int VAR>
cudaError_t launch(const GemvArgs& a, int config, int warps, cudaStream_t stream) {
  if (config >= MMA_FIRST_CONFIG) return launch_mma<VAR>(a, config, warps, stream);
  if (a.m <= 1) return launch_m<1, VAR>(a, config, warps, stream);
  if (a.m == 2) return launch_m<2, VAR>(a, config, warps, stream);
  if (a.m <= 4) return launch_m<4, VAR>(a, config, warps, stream);
  return launch_m<8, VAR>(a, config, warps, stream);
}

}  // namespace radixlm_gemv
