// The launch configs of the CUDA-core decode attention and the launcher of one group size (G: q heads per kv
// head, rounded up to a power of two). Config ids are cuda_decode.py's CONFIGS: (lanes per token, loads in
// flight per lane, warps per block).
#pragma once
#include "decode_attn_kernel.cuh"

#define RADIXLM_DECODE_CONFIGS(X) \
  X(0, 16, 4, 4)                  \
  X(1, 16, 2, 4)                  \
  X(2, 16, 8, 4)                  \
  X(3, 8, 2, 4)                   \
  X(4, 8, 4, 4)                   \
  X(5, 16, 4, 2)                  \
  X(6, 16, 8, 2)                  \
  X(7, 8, 4, 2)                   \
  X(8, 16, 4, 8)

namespace radixlm_decode {

template <int G, int TPT, int U, int WARPS>
cudaError_t launch_one(const DecodeArgs& a, cudaStream_t stream) {
  const dim3 grid(a.num_kv_heads, a.grid_splits, a.bs);
  decode_split_kernel<G, TPT, U, WARPS><<<grid, WARPS * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

template <int G>
cudaError_t launch_group(const DecodeArgs& a, int config, cudaStream_t stream) {
  switch (config) {
#define RADIXLM_DECODE_CASE(id, tpt, u, warps) \
  case id:                                     \
    return launch_one<G, tpt, u, warps>(a, stream);
    RADIXLM_DECODE_CONFIGS(RADIXLM_DECODE_CASE)
#undef RADIXLM_DECODE_CASE
  }
  return cudaErrorInvalidValue;
}

}  // namespace radixlm_decode
