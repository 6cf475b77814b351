// The CUDA-core decode attention for up to 1 q heads per kv head (decode_attn_launch.cuh).
#include "decode_attn_launch.cuh"

namespace radixlm_decode {
cudaError_t launch_decode_g1(const DecodeArgs& a, int config, cudaStream_t stream) {
  return launch_group<1>(a, config, stream);
}
}  // namespace radixlm_decode
