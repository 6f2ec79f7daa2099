// The online softmax's bookkeeping shared by the latent-attention kernels on
// warpgroup MMA (mla_decode_wgmma.cu, deepseek_v4_attention_wgmma.cu): a
// block's 64 heads are wgmma's M, a tile's keys its N, so S sits in the
// accumulator layout: s[4j + i] is head row0 + 8 (i / 2), key
// 8j + 2 (lane % 4) + (i % 2) of the tile, the four lanes of a head together.
#pragma once

#include <cmath>

namespace sluice::cuda {

// Keys from valid_keys on become -inf; each of the thread's two heads' running
// max (log2 units: the scale is folded into the exponent, not applied to s)
// rises to the tile's, and correction is what its old sum and O are scaled
// by (1 while the max is still -inf).
template <int kKeys>
static __device__ __forceinline__ void raise_running_max(float (&s)[kKeys / 2], int valid_keys, int lane,
                                                         float scale_log2, float (&m_run)[2],
                                                         float (&correction)[2]) {
  if (valid_keys < kKeys) {
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (8 * j + 2 * (lane % 4) + (k % 2) >= valid_keys) s[4 * j + k] = -INFINITY;
  }
  float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
    for (int k = 0; k < 4; ++k) row_max[k / 2] = fmaxf(row_max[k / 2], s[4 * j + k]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 1));
    row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 2));
    const float m_new = fmaxf(m_run[h], row_max[h] * scale_log2);
    correction[h] = m_new == -INFINITY ? 1.0f : exp2f(m_run[h] - m_new);
    m_run[h] = m_new;
  }
}

// O (a warpgroup's panels of 64 columns, the accumulator layout) scaled by its
// heads' correction; skipped, exactly, where no head of the warp raised its
// max this tile (every factor 1): on most tiles once the max has settled.
template <int kPanels>
static __device__ __forceinline__ void rescale_panels(float (&o)[kPanels][32], const float (&correction)[2]) {
  if (!__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) return;
#pragma unroll
  for (int p = 0; p < kPanels; ++p)
#pragma unroll
    for (int k = 0; k < 32; ++k) o[p][k] *= correction[(k % 4) / 2];
}

}  // namespace sluice::cuda
