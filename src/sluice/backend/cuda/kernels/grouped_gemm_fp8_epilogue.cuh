// The grouped FP8 expert GEMMs' epilogue (grouped_gemm_fp8.cu, the ring
// kernel; grouped_gemm_fp8_ws.cu, the warp-specialised one): a thread's two
// rows of a 64 x 128 wgmma accumulator tile, already scaled, written as bf16 to
// their slots: the SwiGLU of the gate (columns 0-63) and up (64-127) halves
// into 64 columns, or the 128 columns as they are.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace sluice::cuda {

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
