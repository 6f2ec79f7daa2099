// The grouped FP8 expert GEMMs' per-K-block promotion and epilogue, shared by
// grouped_gemm_fp8.cu (the ring kernel) and grouped_gemm_fp8_ws.cu (the
// warp-specialised ones). Accumulator layout of m64nN (f32), per thread:
// value i is row (warp % 4) * 16 + lane / 4 + 8 * ((i / 2) % 2) of the
// warpgroup's 64, and column (i / 4) * 8 + (lane % 4) * 2 + i % 2.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace sluice::cuda {

// The columns one weight scale covers in a tile of kCols output columns, so
// that no group straddles two 128-row scale blocks: each half (64) at 128,
// whose column blocks start on multiples of 64; 32 at 192 (blocks and halves
// of 96 start on multiples of 32: the wide tiles of grouped_gemm_fp8_ws.cu).
template <int kCols>
inline constexpr int kFp8ScaleGroupCols = kCols == 128 ? 64 : 32;
template <int kCols>
inline constexpr int kFp8ScaleGroups = kCols / kFp8ScaleGroupCols<kCols>;

// One 128-wide K block's MMA result `acc` into the running f32 sum, times
// a_scale[row] * w_scale[block]: a_lo / a_hi the scales of the thread's two
// rows, w[g] the weight block's scale for column group g (kFp8ScaleGroupCols
// columns each, in order; at 128 columns the gate and up halves under
// swiglu, the same block twice otherwise).
template <int kCols>
__device__ __forceinline__ void promote_fp8_k_block(float (&total)[kCols / 2], const float (&acc)[kCols / 2],
                                                    float a_lo, float a_hi, const float (&w)[kFp8ScaleGroups<kCols>]) {
  constexpr int kGroups = kFp8ScaleGroups<kCols>;
  float s_lo[kGroups], s_hi[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    s_lo[g] = a_lo * w[g];
    s_hi[g] = a_hi * w[g];
  }
#pragma unroll
  for (int i = 0; i < kCols / 2; ++i) {
    const bool hi = (i >> 1) & 1;
    const int group = (i / 4) * 8 / kFp8ScaleGroupCols<kCols>;
    total[i] += acc[i] * (hi ? s_hi[group] : s_lo[group]);
  }
}

// A thread's two rows of a 64 x kCols accumulator tile, already scaled,
// written as bf16 to their slots: the SwiGLU of the gate (the first kCols / 2
// columns) and up (the rest) halves into kCols / 2 columns, or the columns as
// they are. The wide tiles' last column block may pass n: those columns are
// not stored (at 128, n is a multiple of the block).
template <bool kSwiglu, int kCols = 128>
__device__ __forceinline__ void store_fp8_tile_rows(const float (&total)[kCols / 2], int row_lo, int row_hi,
                                                    int num_rows, std::int64_t first_slot, std::int64_t n0,
                                                    int col_in_chunk, std::int64_t n, __nv_bfloat16* out) {
  constexpr bool kMasked = kCols != 128;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = h == 0 ? row_lo : row_hi;
    if (r >= num_rows) continue;
    const std::int64_t slot = first_slot + r;
    if constexpr (kSwiglu) {
#pragma unroll
      for (int c = 0; c < kCols / 16; ++c) {
        const std::int64_t col = n0 + c * 8 + col_in_chunk;
        if (kMasked && col >= n) continue;
        float v[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float gate = total[c * 4 + 2 * h + j], up = total[kCols / 4 + c * 4 + 2 * h + j];
          // The fast intrinsics: expf's and the IEEE division's slow paths
          // took ~3-7% of gate_up's samples (S47-3); their error is far under
          // bf16's. A very negative gate gives 1 + inf and so -0, as silu does.
          v[j] = __fdividef(gate, 1.0f + __expf(-gate)) * up;
        }
        *reinterpret_cast<__nv_bfloat162*>(out + slot * n + col) = __floats2bfloat162_rn(v[0], v[1]);
      }
    } else {
#pragma unroll
      for (int c = 0; c < kCols / 8; ++c) {
        const std::int64_t col = n0 + c * 8 + col_in_chunk;
        if (kMasked && col >= n) continue;
        *reinterpret_cast<__nv_bfloat162*>(out + slot * n + col) =
            __floats2bfloat162_rn(total[c * 4 + 2 * h], total[c * 4 + 2 * h + 1]);
      }
    }
  }
}

}  // namespace sluice::cuda
