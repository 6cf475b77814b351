// Python binding of the small-batch GEMV (gemv.h, gemv_kernel.cuh). Every argument is checked in Python
// (radixlm_kernel/cuda_gemv.py) before the call: an exception thrown inside a JIT-built module crashed
// the process on the H200 image, so this returns the CUDA error code instead of throwing.
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <optional>

#include "gemv.h"

namespace {

const __nv_bfloat16* bf16_ptr(const std::optional<torch::Tensor>& t) {
  return t.has_value() ? reinterpret_cast<const __nv_bfloat16*>(t->data_ptr()) : nullptr;
}

int64_t fused_gemv(torch::Tensor y, torch::Tensor x, torch::Tensor w, std::optional<torch::Tensor> residual,
                   std::optional<torch::Tensor> residual_out, std::optional<torch::Tensor> norm_weight,
                   std::optional<torch::Tensor> bias, int64_t prologue, double eps, int64_t config, int64_t warps,
                   int64_t pdl) {
  radixlm_gemv::GemvArgs a;
  a.x = reinterpret_cast<const __nv_bfloat16*>(x.data_ptr());
  a.res = bf16_ptr(residual);
  a.res_out = residual_out.has_value() ? reinterpret_cast<__nv_bfloat16*>(residual_out->data_ptr()) : nullptr;
  a.g = bf16_ptr(norm_weight);
  a.w = reinterpret_cast<const __nv_bfloat16*>(w.data_ptr());
  a.bias = bf16_ptr(bias);
  a.y = y.data_ptr();
  a.ldx = x.stride(0);
  a.ldr = residual.has_value() ? residual->stride(0) : 0;
  a.ldro = residual_out.has_value() ? residual_out->stride(0) : 0;
  a.ldy = y.stride(0);
  a.y_f32 = y.scalar_type() == at::kFloat;
  a.m = static_cast<int>(x.size(0));
  a.n = static_cast<int>(w.size(0));
  a.k = static_cast<int>(w.size(1));
  a.eps = static_cast<float>(eps);
  a.pdl = static_cast<int>(pdl);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cudaError_t err = cudaErrorInvalidValue;
  switch (prologue) {
    case radixlm_gemv::PLAIN: err = radixlm_gemv::launch_plain(a, config, warps, stream); break;
    case radixlm_gemv::NORM: err = radixlm_gemv::launch_norm(a, config, warps, stream); break;
    case radixlm_gemv::NORM_SILU: err = radixlm_gemv::launch_norm_silu(a, config, warps, stream); break;
  }
  return static_cast<int64_t>(err);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fused_gemv", &fused_gemv, "small-batch bf16 GEMV (M <= 8), optionally after add + RMSNorm and "
        "before SiLU-and-mul; returns the cudaError_t of the launch");
}
