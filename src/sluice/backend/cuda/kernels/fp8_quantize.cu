// Activations to FP8 for the block-scaled GEMM: each 1x128 block of a row,
// its amax by a (half-)warp reduction, then q = e4m3(x / scale) with
// scale = amax / 448, so the block's largest value lands on e4m3's largest
// finite value. An all-zero block keeps scale 1.
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

// The scale of (row, col_block) in the layout the GEMMs read: without
// group_offsets the rows are one group of m; with them, group g owns rows
// [offsets[g], offsets[g + 1]) and its own [ceil(k / 128), count] scale
// block at num_col_blocks * offsets[g], as one GEMM per group reads it.
__device__ __forceinline__ std::int64_t scale_index(std::int64_t row, std::int64_t col_block, std::int64_t m,
                                                    std::int64_t num_col_blocks, const std::int32_t* group_offsets,
                                                    std::int32_t num_groups) {
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
  return num_col_blocks * first + col_block * count + (row - first);
}

// k a multiple of 128 (the GEMMs' case): a half-warp a 1x128 block, 8 values
// a lane (one 16-byte load, one 8-byte store), kPassesPerWarp blocks a
// half-warp with every load issued before any block is reduced: a warp of
// one block and 8 bytes a lane kept too few bytes in flight (session 22).
// Rows in [rows, m) are padding: zeros, scale 1. With slot_of_pair, row r's
// quantized blocks go to rows slot_of_pair[r * copies + j] (j < copies) of q
// and of the scales' [k / 128, rows * copies] (QuantizeFp8Args).
constexpr int kPassesPerWarp = 2;
constexpr int kItemsPerWarp = 2 * kPassesPerWarp;
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    quantize_fp8_whole_blocks_kernel(const __nv_bfloat16* x, std::int64_t rows, std::int64_t m, std::int64_t k,
                                     __nv_fp8_storage_t* q, float* scales, const std::int32_t* group_offsets,
                                     std::int32_t num_groups, const std::int32_t* slot_of_pair, int copies) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t num_col_blocks = k / kBlockCols, items = m * num_col_blocks;
  const std::int64_t first_item =
      (static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * kItemsPerWarp;
  const int lane = threadIdx.x & 31, half = lane >> 4, part = lane & 15;
  uint4 raw[kPassesPerWarp];
#pragma unroll
  for (int p = 0; p < kPassesPerWarp; ++p) {
    const std::int64_t item = first_item + 2 * p + half;
    const std::int64_t row = item / num_col_blocks, col_block = item % num_col_blocks;
    raw[p] = make_uint4(0u, 0u, 0u, 0u);
    if (item < items && row < rows)
      raw[p] = *reinterpret_cast<const uint4*>(x + row * k + col_block * kBlockCols + 8 * part);
  }
#pragma unroll
  for (int p = 0; p < kPassesPerWarp; ++p) {
    const std::int64_t item = first_item + 2 * p + half;
    const std::int64_t row = item / num_col_blocks, col_block = item % num_col_blocks;
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw[p]);
    float v[8];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
      amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));  // within the half
    if (item >= items) continue;
    const float scale = e4m3_scale(amax);
    std::uint32_t packed[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i)
      packed[i / 4] |= static_cast<std::uint32_t>(__nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3))
                       << (8 * (i % 4));
    if (slot_of_pair == nullptr) {
      *reinterpret_cast<uint2*>(q + row * k + col_block * kBlockCols + 8 * part) = make_uint2(packed[0], packed[1]);
      if (part == 0) scales[scale_index(row, col_block, m, num_col_blocks, group_offsets, num_groups)] = scale;
      continue;
    }
    for (int j = 0; j < copies; ++j) {
      const std::int64_t slot = slot_of_pair[row * copies + j];
      *reinterpret_cast<uint2*>(q + slot * k + col_block * kBlockCols + 8 * part) = make_uint2(packed[0], packed[1]);
      if (part == 0) scales[col_block * m * copies + slot] = scale;
    }
  }
}

// Any k: a warp a 1x128 block, lane l takes columns l + 32 i, each checked
// against k.
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
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t col = col_block * kBlockCols + i * 32 + lane;
    v[i] = col < k && row < rows ? __bfloat162float(x[row * k + col]) : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = warp_max(amax);
  const float scale = e4m3_scale(amax);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t col = col_block * kBlockCols + i * 32 + lane;
    if (col < k) q[row * k + col] = __nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3);
  }
  if (lane == 0) scales[scale_index(row, col_block, m, num_col_blocks, group_offsets, num_groups)] = scale;
}

}  // namespace

void launch_quantize_fp8_rows(const QuantizeFp8Args& a, const Launch& launch) {
  const std::int64_t padded_rows = a.padded_rows == 0 ? a.rows : a.padded_rows;
  SLUICE_CHECK(padded_rows >= a.rows);
  SLUICE_CHECK(a.group_offsets == nullptr || padded_rows == a.rows);
  const std::int64_t items = padded_rows * ((a.k + kBlockCols - 1) / kBlockCols);
  if (items == 0) return;
  const bool whole = a.k % kBlockCols == 0;
  SLUICE_CHECK(a.slot_of_pair == nullptr ||
               (whole && padded_rows == a.rows && a.group_offsets == nullptr && a.copies >= 1));
  const std::int64_t warps = whole ? (items + kItemsPerWarp - 1) / kItemsPerWarp : items;
  const dim3 grid(static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock)), block(kWarpsPerBlock * 32);
  const auto* x = static_cast<const __nv_bfloat16*>(a.x);
  auto* q = static_cast<__nv_fp8_storage_t*>(a.q);
  if (whole)
    launch_kernel(quantize_fp8_whole_blocks_kernel, grid, block, 0, launch, x, a.rows, padded_rows, a.k, q, a.scales,
                  a.group_offsets, a.num_groups, a.slot_of_pair, a.slot_of_pair == nullptr ? 1 : a.copies);
  else
    launch_kernel(quantize_fp8_rows_kernel, grid, block, 0, launch, x, a.rows, padded_rows, a.k, q, a.scales,
                  a.group_offsets, a.num_groups);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
