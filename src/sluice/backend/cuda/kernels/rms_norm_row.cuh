// The arithmetic of one bf16 row's RMS norm (after the residual add, for
// add_rms_norm), a 16-byte vector at a time. norm_bf16_kernel (elementwise.cu)
// and the decode GEMVs' norm prologue (gemv_norm_prologue.cuh) both call these,
// with the same thread-to-vector mapping, so they give the same bits: a graph
// captured with the norm fused into the GEMV produces what the separate norm
// kernel did.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace sluice::cuda {

// The threads that take a row of `vecs` 16-byte vectors: thread t takes
// vectors t, t + threads, ... Threads past them add nothing to the sums.
__host__ __device__ constexpr int norm_row_threads(int vecs) { return vecs < 256 ? (vecs + 31) / 32 * 32 : 256; }

// One vector of the row as f32 into v, with the residual added first when
// kAdd: rounded to bf16 as it is stored (written back into `residual`), and
// the norm reads the stored value, as an unfused add then norm would. Adds its
// squares to sum_sq in the row's order.
template <bool kAdd>
__device__ __forceinline__ void norm_row_vec(uint4 x, uint4& residual, float (&v)[8], float& sum_sq) {
  const __nv_bfloat162* xh = reinterpret_cast<const __nv_bfloat162*>(&x);
  __nv_bfloat162* rh = reinterpret_cast<__nv_bfloat162*>(&residual);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = __bfloat1622float2(xh[i]);
    if constexpr (kAdd) {
      const float2 r = __bfloat1622float2(rh[i]);
      rh[i] = __floats2bfloat162_rn(r.x + f.x, r.y + f.y);
      f = __bfloat1622float2(rh[i]);
    }
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
    sum_sq += f.x * f.x + f.y * f.y;
  }
}

// 1 / rms from the row's sum of squares.
__device__ __forceinline__ float norm_row_inv_rms(float sum_sq, int cols, float eps) {
  return rsqrtf(sum_sq / static_cast<float>(cols) + eps);
}

// Two normed outputs: v * inv_rms * weight, rounded to bf16.
__device__ __forceinline__ __nv_bfloat162 norm_row_out_pair(float v0, float v1, float inv_rms, float w0, float w1) {
  return __floats2bfloat162_rn(v0 * inv_rms * w0, v1 * inv_rms * w1);
}

// One normed output vector.
__device__ __forceinline__ uint4 norm_row_out(const float (&v)[8], float inv_rms, const float (&w)[8]) {
  uint4 o;
  __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int i = 0; i < 4; ++i) oh[i] = norm_row_out_pair(v[2 * i], v[2 * i + 1], inv_rms, w[2 * i], w[2 * i + 1]);
  return o;
}

}  // namespace sluice::cuda
