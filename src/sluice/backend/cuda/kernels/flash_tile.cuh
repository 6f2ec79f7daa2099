// The per-tile steps of the FlashAttention-2 style mma.sync attention kernels
// (attention_prefill.cu: paged K/V, any head_dim it is built for;
// mla_prefill.cu: MLA's decompressed K/V, QK 192 and V 128), shared so both
// compute the same way. A warp owns kMTiles m16 tiles of query rows; per
// m-tile a thread holds rows lane / 4 and lane / 4 + 8 of the m16n8
// accumulator layout, which is also the next mma's A-fragment layout, so the
// probabilities never leave registers. Scores are unscaled until the softmax,
// which folds the scale into one FFMA per score (log2 domain).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/kernels/mma.cuh"

namespace sluice::cuda::flash {

// The running state before a row's first key: O = 0, max -inf, sum 0.
template <int kMTiles, int kNTilesO>
__device__ __forceinline__ void start_rows(float (&o_acc)[kMTiles][kNTilesO][4], float (&m_run)[kMTiles][2],
                                           float (&l_run)[kMTiles][2]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) o_acc[mt][n][i] = 0.0f;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.0f;
  }
}

// s = Q K^T for the warp's rows (from row q_row0 of s_q) x 8 kNTilesS keys
// (from row 0 of sk) over 16 kKSteps dims; row strides in elements.
template <int kMTiles, int kNTilesS, int kKSteps, int kStrideQ, int kStrideK>
__device__ __forceinline__ void score_tile(float (&s)[kMTiles][kNTilesS][4], const __nv_bfloat16* s_q, int q_row0,
                                           const __nv_bfloat16* sk, int lane) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int n = 0; n < kNTilesS; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[mt][n][i] = 0.0f;
  std::uint32_t q_frag[kMTiles][4];
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
      ldmatrix_x4(q_frag[mt], s_q + (q_row0 + mt * 16 + (lane % 16)) * kStrideQ + ks * 16 + (lane / 16) * 8);
#pragma unroll
    for (int n = 0; n < kNTilesS; n += 2) {
      std::uint32_t b[4];
      ldmatrix_x4(b, sk + (n * 8 + (lane % 8) + (lane / 16) * 8) * kStrideK + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_16816(s[mt][n], q_frag[mt], b[0], b[1]);
        mma_16816(s[mt][n + 1], q_frag[mt], b[2], b[3]);
      }
    }
  }
}

// Causal mask (key > position: -inf) where the tile reaches past the warp's
// first position, then the online softmax: s becomes P (unnormalised, log2
// domain with the scale folded in), the running max and per-lane row sums
// advance, and o_acc is rescaled. m_run must be finite after the first tile
// a row sees (its key 0, or a split piece's first key, is in it).
template <int kMTiles, int kNTilesS, int kNTilesO>
__device__ __forceinline__ void softmax_tile(float (&s)[kMTiles][kNTilesS][4], float (&o_acc)[kMTiles][kNTilesO][4],
                                             float (&m_run)[kMTiles][2], float (&l_run)[kMTiles][2], int key0,
                                             int warp_first_pos, float scale_log2, int lane) {
  const bool needs_mask = key0 + 8 * kNTilesS - 1 > warp_first_pos;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    const int pos0 = warp_first_pos + mt * 16 + lane / 4;
    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = key0 + n * 8 + (lane % 4) * 2 + (i & 1);
        const int pos = pos0 + (i / 2) * 8;
        float v = s[mt][n][i];  // unscaled: the scale is folded into the exponent below
        if (needs_mask && key > pos) v = -INFINITY;
        s[mt][n][i] = v;
        row_max[i / 2] = fmaxf(row_max[i / 2], v);
      }
    }
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 1));
      row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 2));
      const float m_new = fmaxf(m_run[mt][h], row_max[h] * scale_log2);
      correction[h] = m_new == -INFINITY ? 1.0f : exp2f(m_run[mt][h] - m_new);
      m_run[mt][h] = m_new;
    }
    float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // Masked scores are -inf and give 0.
        const float pr = exp2f(fmaf(s[mt][n][i], scale_log2, -m_run[mt][i / 2]));
        s[mt][n][i] = pr;
        row_sum[i / 2] += pr;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[mt][h] = l_run[mt][h] * correction[h] + row_sum[h];
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n) {
      o_acc[mt][n][0] *= correction[0];
      o_acc[mt][n][1] *= correction[0];
      o_acc[mt][n][2] *= correction[1];
      o_acc[mt][n][3] *= correction[1];
    }
  }
}

// o_acc += P V for the tile's 8 kNTilesS keys; V rows from row 0 of sv
// (stride kStrideV elements), 8 kNTilesO dims.
template <int kMTiles, int kNTilesS, int kNTilesO, int kStrideV>
__device__ __forceinline__ void pv_tile(const float (&s)[kMTiles][kNTilesS][4], float (&o_acc)[kMTiles][kNTilesO][4],
                                        const __nv_bfloat16* sv, int lane) {
#pragma unroll
  for (int kk = 0; kk < kNTilesS / 2; ++kk) {
    std::uint32_t a[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      a[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      a[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      a[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      a[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int n = 0; n < kNTilesO; n += 2) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, sv + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kStrideV + n * 8 + (lane / 16) * 8);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_16816(o_acc[mt][n], a[mt], b[0], b[1]);
        mma_16816(o_acc[mt][n + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

}  // namespace sluice::cuda::flash
