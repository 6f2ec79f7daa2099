// The grouped FP8 expert GEMMs' per-K-block promotion and epilogue, shared by
// grouped_gemm_fp8.cu (the ring kernel) and grouped_gemm_fp8_ws.cu (the
// warp-specialised ones). Accumulator layout of m64nN (f32), per thread:
// value i is row (warp % 4) * 16 + lane / 4 + 8 * ((i / 2) % 2) of the
// warpgroup's 64, and column (i / 4) * 8 + (lane % 4) * 2 + i % 2.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace sluice::cuda {

// One 128-wide K block's MMA result `acc` into the running f32 sum, times
// a_scale[row] * w_scale[block]: a_lo / a_hi the scales of the thread's two
// rows, w_gate the weight block's scale for columns 0-63 and w_up for 64-127
// (the up half under swiglu; the same block otherwise).
__device__ __forceinline__ void promote_fp8_k_block(float (&total)[64], const float (&acc)[64], float a_lo, float a_hi,
                                                    float w_gate, float w_up) {
  const float s00 = a_lo * w_gate, s01 = a_hi * w_gate;
  const float s10 = a_lo * w_up, s11 = a_hi * w_up;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const bool hi = (i >> 1) & 1;
    const bool up = i >= 32;
    total[i] += acc[i] * (up ? (hi ? s11 : s10) : (hi ? s01 : s00));
  }
}

// A thread's two rows of a 64 x 128 accumulator tile, already scaled, written
// as bf16 to their slots: the SwiGLU of the gate (columns 0-63) and up
// (64-127) halves into 64 columns, or the 128 columns as they are.
template <bool kSwiglu>
__device__ __forceinline__ void store_fp8_tile_rows(const float (&total)[64], int row_lo, int row_hi, int num_rows,
                                                    std::int64_t first_slot, std::int64_t n0, int col_in_chunk,
                                                    std::int64_t n, __nv_bfloat16* out) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = h == 0 ? row_lo : row_hi;
    if (r >= num_rows) continue;
    const std::int64_t slot = first_slot + r;
    if constexpr (kSwiglu) {
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        float v[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float gate = total[c * 4 + 2 * h + j], up = total[32 + c * 4 + 2 * h + j];
          v[j] = gate / (1.0f + expf(-gate)) * up;
        }
        const std::int64_t col = n0 + c * 8 + col_in_chunk;
        *reinterpret_cast<__nv_bfloat162*>(out + slot * n + col) = __floats2bfloat162_rn(v[0], v[1]);
      }
    } else {
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        const std::int64_t col = n0 + c * 8 + col_in_chunk;
        *reinterpret_cast<__nv_bfloat162*>(out + slot * n + col) =
            __floats2bfloat162_rn(total[c * 4 + 2 * h], total[c * 4 + 2 * h + 1]);
      }
    }
  }
}

}  // namespace sluice::cuda
