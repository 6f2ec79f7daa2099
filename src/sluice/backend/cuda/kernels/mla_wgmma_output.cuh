// What the wgmma MLA decode kernel (mla_decode_wgmma.cu) writes at a
// split's end, from a warpgroup's half of O ([64 heads][256 latent dims] as
// four m64n64 accumulators: its panels of 64 columns) for the two rows a
// thread holds, row0 and row0 + 8: O / l
// straight to o_latent in bf16 when one split covers the context, or the
// simple kernel's partials (unnormalised O and (max, sum), the max in
// natural-log units: the combine uses exp).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "sluice/backend/cuda/kernels/mla_kernels.h"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {

inline constexpr int kMlaWgmmaRank = 512;                                          // latent dims of O
inline constexpr int kMlaWgmmaPanelsPerGroup = kMlaWgmmaRank / kWgmmaPanelCols / 2;  // 4: a warpgroup's half

// The block's heads start at first_head; row part_base / num_heads is its decode row.
struct MlaWgmmaOutputSite {
  int first_head, row0, warpgroup, lane;
  std::int64_t part_base;
};

__device__ __forceinline__ void store_mla_o_latent(const MlaDecodeArgs& a, const MlaWgmmaOutputSite& at,
                                                   const float (&o_acc)[kMlaWgmmaPanelsPerGroup][32],
                                                   const float (&inv_l)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = at.first_head + at.row0 + 8 * h;
    if (head >= a.num_heads) continue;
    auto* dst = static_cast<__nv_bfloat16*>(a.o_latent) + (at.part_base + head) * kMlaWgmmaRank +
                at.warpgroup * kMlaWgmmaPanelsPerGroup * kWgmmaPanelCols;
#pragma unroll
    for (int p = 0; p < kMlaWgmmaPanelsPerGroup; ++p)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = p * kWgmmaPanelCols + 8 * j + 2 * (at.lane % 4);
        *reinterpret_cast<__nv_bfloat162*>(dst + col) =
            __floats2bfloat162_rn(o_acc[p][4 * j + 2 * h] * inv_l[h], o_acc[p][4 * j + 2 * h + 1] * inv_l[h]);
      }
  }
}

// m_run in log2 units (the kernels' exp2 softmax).
__device__ __forceinline__ void store_mla_partials(const MlaDecodeArgs& a, const MlaWgmmaOutputSite& at, int split,
                                                   const float (&o_acc)[kMlaWgmmaPanelsPerGroup][32],
                                                   const float (&m_run)[2], const float (&l_run)[2]) {
  constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = at.first_head + at.row0 + 8 * h;
    if (head >= a.num_heads) continue;
    const std::int64_t part = (at.part_base + head) * a.num_splits + split;
    if (at.warpgroup == 0 && at.lane % 4 == 0) {
      a.partial_stats[2 * part] = m_run[h] == -INFINITY ? -INFINITY : m_run[h] * kLn2;
      a.partial_stats[2 * part + 1] = l_run[h];
    }
    float* dst = a.partial_out + part * kMlaWgmmaRank + at.warpgroup * kMlaWgmmaPanelsPerGroup * kWgmmaPanelCols;
#pragma unroll
    for (int p = 0; p < kMlaWgmmaPanelsPerGroup; ++p)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = p * kWgmmaPanelCols + 8 * j + 2 * (at.lane % 4);
        *reinterpret_cast<float2*>(dst + col) = make_float2(o_acc[p][4 * j + 2 * h], o_acc[p][4 * j + 2 * h + 1]);
      }
  }
}

}  // namespace sluice::cuda
