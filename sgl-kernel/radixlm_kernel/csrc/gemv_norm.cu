// The NORM instantiations of both kernels (gemv_launch.cuh), one file per variant so that they compile in
// parallel.
#include "gemv_launch.cuh"

namespace radixlm_gemv {
cudaError_t launch_norm(const GemvArgs& a, int config, int warps, cudaStream_t stream) {
  return launch<NORM>(a, config, warps, stream);
}
}  // namespace radixlm_gemv
