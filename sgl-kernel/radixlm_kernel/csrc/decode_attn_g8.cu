// The CUDA-core decode attention for up to 8 q heads per kv head (decode_attn_launch.cuh).
#include "decode_attn_launch.cuh"

namespace radixlm_decode {
cudaError_t launch_decode_g8(const DecodeArgs& a, int config, cudaStream_t stream) {
  return launch_group<8>(a, config, stream);
}
}  // namespace radixlm_decode
