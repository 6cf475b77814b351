// Decode attention on CUDA cores over a page-size-1 bf16 KV pool: one block per (kv head, split, row) attends the
// G q heads of that kv head (GQA: each token's K/V row is read once) over the split's tokens.
// TPT lanes share a token: each holds DPL = 128 / TPT of its dims (16-byte chunks, chunk c of lane dl at
// (c * TPT + dl) * 8, so one load instruction covers whole 128-byte runs), so a warp reads 32 / TPT tokens per
// load, and each lane keeps U such loads of K and of V in flight before it uses any (streaming loads that skip
// L1). No shared-memory staging, so a block needs no more than its registers and several fit on an SM: the
// Triton kernel's 128-token tiles, double-buffered in shared memory, let one block per SM run and read K/V at
// 1.3-2.5 TB/s at 2-16 rows (RESULTS.md, twenty-fifth session).
// Scores are reduced over the TPT lanes with shuffles; each lane runs the online softmax (base 2, q pre-scaled by
// sm_scale * log2 e) for its tokens; the block's warps are merged through shared memory at the end. With one
// split per grid the block writes the output; otherwise it writes its normalized partial and log-sum-exp (the
// layout of decode_attention.py's scratch), and the last block of a (row, kv head) to finish merges them.
#pragma once
#include <stdint.h>

#include "decode_attn.h"

namespace radixlm_decode {

constexpr float LN2 = 0.6931471805599453f;
constexpr float NEG_BIG = -1e30f;  // a finite "minus infinity": exp2 of a difference of two is 1, not NaN

__device__ __forceinline__ uint4 load_kv(const __nv_bfloat16* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// element j (0..7) of eight bf16 packed in a uint4, as float
__device__ __forceinline__ float elem(const uint4& v, int j) {
  const uint32_t w = j < 2 ? v.x : j < 4 ? v.y : j < 6 ? v.z : v.w;
  return (j & 1) ? hi_bf16(w) : lo_bf16(w);
}

__device__ __forceinline__ int64_t load_index(const void* p, int is64, int i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

__device__ __forceinline__ int cdiv(int a, int b) { return (a + b - 1) / b; }

// Running softmax state of G heads over DPL dims: max m, sum l (base 2), unnormalized output acc.
template <int G, int DPL>
struct Softmax {
  float m[G], l[G], acc[G][DPL];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int h = 0; h < G; ++h) {
      m[h] = NEG_BIG;
      l[h] = 0.f;
#pragma unroll
      for (int d = 0; d < DPL; ++d) acc[h][d] = 0.f;
    }
  }

  // fold in another state of the same heads (m2, l2, acc2) for head h
  __device__ __forceinline__ void merge_head(int h, float m2, float l2, const float (&acc2)[DPL]) {
    const float mn = fmaxf(m[h], m2), a1 = fast_exp2(m[h] - mn), a2 = fast_exp2(m2 - mn);
    l[h] = l[h] * a1 + l2 * a2;
#pragma unroll
    for (int d = 0; d < DPL; ++d) acc[h][d] = acc[h][d] * a1 + acc2[d] * a2;
    m[h] = mn;
  }
};

// The slot ids of this lane's U tokens from position t (step TPW); -1 past `end`.
template <int U, int TPW>
__device__ __forceinline__ void load_slots(int (&slot)[U], const int32_t* r2t, int t, int end) {
#pragma unroll
  for (int u = 0; u < U; ++u) slot[u] = t + u * TPW < end ? __ldg(r2t + t + u * TPW) : -1;
}

template <int G, int TPT, int U, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) decode_split_kernel(const DecodeArgs a) {
  constexpr int VEC = HEAD_DIM / TPT / 8;  // 16-byte chunks per lane per token
  constexpr int DPL = VEC * 8;             // dims per lane
  constexpr int TPW = 32 / TPT;            // tokens per warp per load
  constexpr int STEP = WARPS * TPW * U;    // tokens per block iteration
  __shared__ float sm_acc[WARPS][G][HEAD_DIM];
  __shared__ float sm_m[WARPS][G], sm_l[WARPS][G];
  __shared__ int sm_last;

  const int kvh = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int seq_len = static_cast<int>(load_index(a.seq_lens, a.lens64, b));
  const int num_splits = min(max(cdiv(seq_len, a.min_split), 1), a.grid_splits);
  const int split_len = cdiv(cdiv(seq_len, num_splits), a.align) * a.align;
  const int start = split * split_len, end = min(start + split_len, seq_len);
  if (split >= num_splits || start >= end) return;
  const int64_t row = load_index(a.req_pool, a.pool64, b);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tok_lane = lane / TPT, dl = lane % TPT;

  float q[G][DPL];  // this lane's dims of each q head, times sm_scale * log2 e (0 for heads past the group)
#pragma unroll
  for (int h = 0; h < G; ++h) {
    const __nv_bfloat16* qp = a.q + b * a.q_s0 + (static_cast<long>(kvh) * a.group + h) * a.q_s1;
#pragma unroll
    for (int c = 0; c < VEC; ++c) {
      const uint4 raw = h < a.group ? *reinterpret_cast<const uint4*>(qp + (c * TPT + dl) * 8) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < 8; ++j) q[h][c * 8 + j] = elem(raw, j) * a.scale_log2;
    }
  }

  Softmax<G, DPL> st;
  st.init();
  const int32_t* r2t = a.req_to_token + row * a.r2t_s0;
  const __nv_bfloat16* kp = a.k + kvh * a.kb_s1 + dl * 8;
  const __nv_bfloat16* vp = a.v + kvh * a.vb_s1 + dl * 8;
  const int first = start + warp * TPW * U + tok_lane;
  int slot[U];
  load_slots<U, TPW>(slot, r2t, first, end);
  for (int t = first; t - tok_lane < end; t += STEP) {
    uint4 kr[U][VEC], vr[U][VEC];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long kb = static_cast<long>(slot[u]) * a.kb_s0, vb = static_cast<long>(slot[u]) * a.vb_s0;
#pragma unroll
      for (int c = 0; c < VEC; ++c) {
        kr[u][c] = slot[u] >= 0 ? load_kv(kp + kb + c * TPT * 8) : make_uint4(0, 0, 0, 0);
        vr[u][c] = slot[u] >= 0 ? load_kv(vp + vb + c * TPT * 8) : make_uint4(0, 0, 0, 0);
      }
    }
    int next[U];
    load_slots<U, TPW>(next, r2t, t + STEP, end);  // the next iteration's slot ids, one iteration ahead

    float s[U][G];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int h = 0; h < G; ++h) {
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < VEC; ++c) {
#pragma unroll
          for (int j = 0; j < 8; ++j) dot = fmaf(q[h][c * 8 + j], elem(kr[u][c], j), dot);
        }
        s[u][h] = dot;
      }
    }
#pragma unroll
    for (int off = TPT / 2; off > 0; off >>= 1) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int h = 0; h < G; ++h) s[u][h] += __shfl_xor_sync(0xffffffffu, s[u][h], off);
      }
    }
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float mx = st.m[h];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = slot[u] >= 0 ? fmaxf(mx, s[u][h]) : mx;
      const float alpha = fast_exp2(st.m[h] - mx);
      st.l[h] *= alpha;
#pragma unroll
      for (int d = 0; d < DPL; ++d) st.acc[h][d] *= alpha;
      st.m[h] = mx;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float p = slot[u] >= 0 ? fast_exp2(s[u][h] - mx) : 0.f;
        st.l[h] += p;
#pragma unroll
        for (int c = 0; c < VEC; ++c) {
#pragma unroll
          for (int j = 0; j < 8; ++j) st.acc[h][c * 8 + j] = fmaf(p, elem(vr[u][c], j), st.acc[h][c * 8 + j]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) slot[u] = next[u];
  }

  // the warp's token lanes (lanes with the same dims) into one state, then the warps through shared memory
#pragma unroll
  for (int off = TPT; off < 32; off <<= 1) {
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float other[DPL];
#pragma unroll
      for (int d = 0; d < DPL; ++d) other[d] = __shfl_xor_sync(0xffffffffu, st.acc[h][d], off);
      st.merge_head(h, __shfl_xor_sync(0xffffffffu, st.m[h], off), __shfl_xor_sync(0xffffffffu, st.l[h], off), other);
    }
  }
  if (tok_lane == 0) {
#pragma unroll
    for (int h = 0; h < G; ++h) {
#pragma unroll
      for (int c = 0; c < VEC; ++c) {
#pragma unroll
        for (int j = 0; j < 8; ++j) sm_acc[warp][h][(c * TPT + dl) * 8 + j] = st.acc[h][c * 8 + j];
      }
      if (dl == 0) {
        sm_m[warp][h] = st.m[h];
        sm_l[warp][h] = st.l[h];
      }
    }
  }
  __syncthreads();

  const bool direct = a.grid_splits == 1;
  for (int i = threadIdx.x; i < G * HEAD_DIM; i += WARPS * 32) {
    const int h = i / HEAD_DIM, d = i % HEAD_DIM;
    if (h >= a.group) break;
    float mx = NEG_BIG;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, sm_m[w][h]);
    float num = 0.f, den = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float e = fast_exp2(sm_m[w][h] - mx);
      num = fmaf(sm_acc[w][h][d], e, num);
      den = fmaf(sm_l[w][h], e, den);
    }
    const long qh = static_cast<long>(kvh) * a.group + h;
    if (direct) {
      a.o[b * a.o_s0 + qh * a.o_s1 + d] = __float2bfloat16(num / den);
    } else {
      a.mid_o[b * a.mo_s0 + qh * a.mo_s1 + split * a.mo_s2 + d] = num / den;
      if (d == 0) a.mid_lse[b * a.ml_s0 + qh * a.ml_s1 + split] = (mx + __log2f(den)) * LN2;
    }
  }
  if (direct) return;

  // the last block of this (row, kv head) to finish merges the partials (no merge launch)
  __threadfence();
  __syncthreads();
  const int active = cdiv(seq_len, split_len);  // the splits that hold tokens
  if (threadIdx.x == 0) {
    int* counter = a.counters + b * a.cnt_s0 + kvh;
    const int arrived = atomicAdd(counter, 1);
    sm_last = arrived == active - 1;
    if (sm_last) *counter = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!sm_last) return;
  __threadfence();
  for (int i = threadIdx.x; i < G * HEAD_DIM; i += WARPS * 32) {
    const int h = i / HEAD_DIM, d = i % HEAD_DIM;
    if (h >= a.group) break;
    const long qh = static_cast<long>(kvh) * a.group + h;
    const float* lse = a.mid_lse + b * a.ml_s0 + qh * a.ml_s1;
    const float* part = a.mid_o + b * a.mo_s0 + qh * a.mo_s1 + d;
    float mx = NEG_BIG, num = 0.f, den = 0.f;
#pragma unroll 4
    for (int sp = 0; sp < active; ++sp) {  // unrolled: the loads of several splits in flight at once
      const float ls = __ldcg(lse + sp), os = __ldcg(part + sp * a.mo_s2);
      const float mn = fmaxf(mx, ls), a1 = __expf(mx - mn), a2 = __expf(ls - mn);
      num = num * a1 + os * a2;
      den = den * a1 + a2;
      mx = mn;
    }
    a.o[b * a.o_s0 + qh * a.o_s1 + d] = __float2bfloat16(num / den);
  }
}

}  // namespace radixlm_decode
