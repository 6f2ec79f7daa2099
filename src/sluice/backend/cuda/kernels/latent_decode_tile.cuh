// A warp's share of one key tile in the two tensor-core latent-attention
// decode kernels (MLA's, mla_decode_mma.cu, and DeepSeek-V4's sparse
// attention, deepseek_v4_attention_mma.cu): 64 query heads a block against
// 32 latent rows a tile, eight warps, each with a [16 heads, 16 keys] block
// of scores and a [16 heads, kNTilesO * 8 dims] block of the output.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/kernels/mma.cuh"

namespace sluice::cuda {

// Scores [16 rows from s_rows, 16 keys from s_keys] = q · k over kWidth dims
// (queries s_q and the tile's keys kt in shared memory, kStride elements a
// row), stored to s_scores[row * kScoreStride + key].
template <int kWidth, int kStride, int kScoreStride>
__device__ __forceinline__ void warp_score_block(const __nv_bfloat16* s_q, const __nv_bfloat16* kt, int s_rows,
                                                 int s_keys, int lane, float* s_scores) {
  float s[2][4];
#pragma unroll
  for (int n = 0; n < 2; ++n)
#pragma unroll
    for (int k = 0; k < 4; ++k) s[n][k] = 0.0f;
#pragma unroll 4
  for (int ks = 0; ks < kWidth / 16; ++ks) {
    std::uint32_t q_frag[4], b[4];
    ldmatrix_x4(q_frag, s_q + (s_rows + (lane % 16)) * kStride + ks * 16 + (lane / 16) * 8);
    ldmatrix_x4(b, kt + (s_keys + (lane % 8) + (lane / 16) * 8) * kStride + ks * 16 + ((lane / 8) % 2) * 8);
    mma_16816(s[0], q_frag, b[0], b[1]);
    mma_16816(s[1], q_frag, b[2], b[3]);
  }
#pragma unroll
  for (int n = 0; n < 2; ++n)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int row = s_rows + lane / 4 + (k / 2) * 8;
      const int key = s_keys + n * 8 + (lane % 4) * 2 + (k & 1);
      s_scores[row * kScoreStride + key] = s[n][k];
    }
}

// The output block's rows (o_rows + lane / 4, and 8 below) scaled by their
// softmax correction for the tile's new maximum.
template <int kNTilesO>
__device__ __forceinline__ void rescale_output_block(float (&o_acc)[kNTilesO][4], const float* s_correction,
                                                     int o_rows, int lane) {
  const float correction0 = s_correction[o_rows + lane / 4];
  const float correction1 = s_correction[o_rows + lane / 4 + 8];
#pragma unroll
  for (int n = 0; n < kNTilesO; ++n) {
    o_acc[n][0] *= correction0;
    o_acc[n][1] *= correction0;
    o_acc[n][2] *= correction1;
    o_acc[n][3] *= correction1;
  }
}

}  // namespace sluice::cuda
