// Python binding of the CUDA-core decode attention (decode_attn.h). Every argument is checked in Python
// (radixlm_kernel/cuda_decode.py) before the call, and errors come back as the launch's cudaError_t: an
// exception thrown inside a JIT-built module crashed the process on the H200 image (cuda_gemv.py).
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "decode_attn.h"

namespace {

const __nv_bfloat16* bf16(const torch::Tensor& t) { return reinterpret_cast<const __nv_bfloat16*>(t.data_ptr()); }

int64_t decode_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor o,
                         torch::Tensor req_to_token, torch::Tensor req_pool, torch::Tensor seq_lens,
                         torch::Tensor mid_o, torch::Tensor mid_lse, torch::Tensor counters, double sm_scale,
                         int64_t group, int64_t grid_splits, int64_t min_split, int64_t align, int64_t config) {
  radixlm_decode::DecodeArgs a;
  a.q = bf16(q);
  a.k = bf16(k);
  a.v = bf16(v);
  a.req_to_token = req_to_token.data_ptr<int32_t>();
  a.req_pool = req_pool.data_ptr();
  a.seq_lens = seq_lens.data_ptr();
  a.mid_o = mid_o.data_ptr<float>();
  a.mid_lse = mid_lse.data_ptr<float>();
  a.o = reinterpret_cast<__nv_bfloat16*>(o.data_ptr());
  a.counters = counters.data_ptr<int32_t>();
  a.q_s0 = q.stride(0), a.q_s1 = q.stride(1);
  a.kb_s0 = k.stride(0), a.kb_s1 = k.stride(1), a.vb_s0 = v.stride(0), a.vb_s1 = v.stride(1);
  a.r2t_s0 = req_to_token.stride(0);
  a.mo_s0 = mid_o.stride(0), a.mo_s1 = mid_o.stride(1), a.mo_s2 = mid_o.stride(2);
  a.ml_s0 = mid_lse.stride(0), a.ml_s1 = mid_lse.stride(1);
  a.o_s0 = o.stride(0), a.o_s1 = o.stride(1);
  a.cnt_s0 = counters.stride(0);
  a.bs = static_cast<int>(q.size(0));
  a.num_kv_heads = static_cast<int>(k.size(1));
  a.group = static_cast<int>(group);
  a.grid_splits = static_cast<int>(grid_splits);
  a.min_split = static_cast<int>(min_split);
  a.align = static_cast<int>(align);
  a.pool64 = req_pool.scalar_type() == at::kLong;
  a.lens64 = seq_lens.scalar_type() == at::kLong;
  a.scale_log2 = static_cast<float>(sm_scale * 1.4426950408889634);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cudaError_t err = cudaErrorInvalidValue;
  if (group <= 1) err = radixlm_decode::launch_decode_g1(a, config, stream);
  else if (group <= 2) err = radixlm_decode::launch_decode_g2(a, config, stream);
  else if (group <= 4) err = radixlm_decode::launch_decode_g4(a, config, stream);
  else if (group <= 8) err = radixlm_decode::launch_decode_g8(a, config, stream);
  return static_cast<int64_t>(err);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode_attention", &decode_attention, "decode attention on CUDA cores over a page-size-1 bf16 KV pool "
        "(head dim 128, up to 8 q heads per kv head); returns the cudaError_t of the launch");
}
