// The host-side interface of the CUDA-core decode attention (decode_attn_kernel.cuh holds the kernel): the launch
// arguments and one launcher per group size, each in its own .cu file so that they compile in parallel.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace radixlm_decode {

constexpr int HEAD_DIM = 128;  // the only head size these kernels take (checked in Python)
constexpr int MAX_WARPS = 8;

// Split semantics are decode_attention.py's with SPLITS_FROM_LEN: row b gets
// min(max(cdiv(len, min_split), 1), grid_splits) splits of cdiv(cdiv(len, splits), align) * align tokens.
struct DecodeArgs {
  const __nv_bfloat16* q;  // [bs, Hq, 128]
  const __nv_bfloat16* k;  // [slots, Hk, 128]
  const __nv_bfloat16* v;
  const int32_t* req_to_token;  // [rows, >= len]
  const void* req_pool;         // [bs] int32 or int64 (pool64)
  const void* seq_lens;         // [bs] int32 or int64 (lens64)
  float* mid_o;                 // [>= bs, Hq, >= grid_splits, 128] fp32 split partials (normalized)
  float* mid_lse;               // [>= bs, Hq, >= grid_splits] their log-sum-exp (natural log)
  __nv_bfloat16* o;             // [bs, Hq, 128]
  int* counters;                // [>= bs, >= Hk] int32, zeros between launches (grid_splits > 1)
  long q_s0, q_s1, kb_s0, kb_s1, vb_s0, vb_s1, r2t_s0, mo_s0, mo_s1, mo_s2, ml_s0, ml_s1, o_s0, o_s1, cnt_s0;
  int bs, num_kv_heads, group, grid_splits, min_split, align, pool64, lens64;
  float scale_log2;  // sm_scale * log2(e)
};

// config: an id of decode_attn_configs.h; returns the launch's error
cudaError_t launch_decode_g1(const DecodeArgs& a, int config, cudaStream_t stream);
cudaError_t launch_decode_g2(const DecodeArgs& a, int config, cudaStream_t stream);
cudaError_t launch_decode_g4(const DecodeArgs& a, int config, cudaStream_t stream);
cudaError_t launch_decode_g8(const DecodeArgs& a, int config, cudaStream_t stream);

}  // namespace radixlm_decode
