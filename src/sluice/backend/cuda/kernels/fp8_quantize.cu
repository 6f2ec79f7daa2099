// Activations to FP8 for the block-scaled GEMM: one warp per 1x128 block of a
// row (4 values a lane, consecutive ones when k is whole blocks), the block's amax by a warp reduction, then
// q = e4m3(x / scale) with scale = amax / 448, so the block's largest value
// lands on e4m3's largest finite value. An all-zero block keeps scale 1.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/moe_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kBlockCols = 128;
constexpr int kWarpsPerBlock = 8;

// Without group_offsets the rows are one group of m; with them, group g owns
// rows [offsets[g], offsets[g + 1]) and its own [ceil(k / 128), count] scale
// block at num_col_blocks * offsets[g], as one GEMM per group reads it.
// Rows in [rows, m) are padding: zeros, scale 1.
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    quantize_fp8_rows_kernel(const __nv_bfloat16* x, std::int64_t rows, std::int64_t m, std::int64_t k,
                             __nv_fp8_storage_t* q, float* scales, const std::int32_t* group_offsets,
                             std::int32_t num_groups) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t num_col_blocks = (k + kBlockCols - 1) / kBlockCols;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (item >= m * num_col_blocks) return;
  const std::int64_t row = item / num_col_blocks, col_block = item % num_col_blocks;
  const int lane = threadIdx.x & 31;
  float v[4];
  float amax = 0.0f;
  // Whole blocks (k a multiple of 128, the GEMMs' case): lane l takes columns
  // 4l..4l+3, one 8-byte load and one 4-byte store (single bytes stored a lane
  // at a time wrote 32-byte pieces; session 12). Otherwise lane l takes
  // columns l + 32 i, each checked against k.
  const bool whole = k % kBlockCols == 0;
  const std::int64_t base = row * k + col_block * kBlockCols;
  if (whole) {
    uint2 raw = make_uint2(0u, 0u);
    if (row < rows) raw = *reinterpret_cast<const uint2*>(x + base + 4 * lane);
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::int64_t col = col_block * kBlockCols + i * 32 + lane;
      v[i] = col < k && row < rows ? __bfloat162float(x[row * k + col]) : 0.0f;
      amax = fmaxf(amax, fabsf(v[i]));
    }
  }
  amax = warp_max(amax);
  const float scale = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
  if (whole) {
    std::uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i)
      packed |= static_cast<std::uint32_t>(__nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3)) << (8 * i);
    *reinterpret_cast<std::uint32_t*>(q + base + 4 * lane) = packed;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::int64_t col = col_block * kBlockCols + i * 32 + lane;
      if (col < k) q[row * k + col] = __nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3);
    }
  }
  if (lane != 0) return;
  std::int64_t first = 0, count = m;
  if (group_offsets != nullptr) {
    int lo = 0, hi = num_groups - 1;  // the last group starting at or before row
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (group_offsets[mid] <= row) lo = mid; else hi = mid - 1;
    }
    first = group_offsets[lo];
    count = group_offsets[lo + 1] - first;
  }
  scales[num_col_blocks * first + col_block * count + (row - first)] = scale;
}

}  // namespace

void launch_quantize_fp8_rows(const QuantizeFp8Args& a, const Launch& launch) {
  const std::int64_t padded_rows = a.padded_rows == 0 ? a.rows : a.padded_rows;
  SLUICE_CHECK(padded_rows >= a.rows);
  SLUICE_CHECK(a.group_offsets == nullptr || padded_rows == a.rows);
  const std::int64_t items = padded_rows * ((a.k + kBlockCols - 1) / kBlockCols);
  if (items == 0) return;
  launch_kernel(quantize_fp8_rows_kernel, dim3(static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock)),
                dim3(kWarpsPerBlock * 32), 0, launch, static_cast<const __nv_bfloat16*>(a.x), a.rows, padded_rows,
                a.k, static_cast<__nv_fp8_storage_t*>(a.q), a.scales, a.group_offsets, a.num_groups);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
