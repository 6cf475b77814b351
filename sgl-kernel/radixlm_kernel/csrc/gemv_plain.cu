// The PLAIN instantiations of both kernels (gemv_launch.cuh), one file per variant so that they compile in
// parallel.
#include "gemv_launch.cuh"

namespace radixlm_gemv {
cudaError_t launch_plain(const GemvArgs& a, int config, int warps, cudaStream_t stream) {
  return launch<PLAIN>(a, config, warps, stream);
}
}  // namespace radixlm_gemv
