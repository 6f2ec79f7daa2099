#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_quantized.h"

namespace sluice::cuda {
namespace {

constexpr int kBlock = 128;          // FP8 scale block (rows and columns)
constexpr int kGroup = 32;           // FP4 inputs a scale
constexpr int kConvertThreads = 256;
constexpr int kThreads = 256;

__device__ __forceinline__ float e2m1(unsigned code) {
  constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[code & 7u];
  return (code & 8u) != 0 ? -m : m;
}

// One block a 128x128 tile: the exponents of its nonzero groups, the tile's
// scale, then every value converted.
__global__ void fp4_to_fp8_kernel(V4Fp4ToFp8Args a) {
  __shared__ int max_exp, min_exp;
  if (threadIdx.x == 0) {
    max_exp = INT_MIN;
    min_exp = INT_MAX;
  }
  __syncthreads();
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * kBlock;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kBlock;
  const std::int64_t groups_per_row = a.cols / kGroup, bytes_per_row = a.cols / 2;
  constexpr int kGroupsPerTileRow = kBlock / kGroup;
  for (int g = threadIdx.x; g < kBlock * kGroupsPerTileRow; g += blockDim.x) {
    const std::int64_t r = row0 + g / kGroupsPerTileRow, gc = col0 / kGroup + g % kGroupsPerTileRow;
    if (r >= a.rows || gc >= groups_per_row) continue;
    const std::uint8_t* codes = a.codes + r * bytes_per_row + gc * (kGroup / 2);
    bool nonzero = false;
    for (int i = 0; i < kGroup / 2; ++i) nonzero |= (codes[i] & 0x77u) != 0;
    if (!nonzero) continue;
    const int e = static_cast<int>(a.group_scales[r * groups_per_row + gc]) - 127;
    atomicMax(&max_exp, e);
    atomicMin(&min_exp, e);
  }
  __syncthreads();
  const bool any = max_exp != INT_MIN;
  const int block_exp = any ? max_exp - 6 : 0;
  if (threadIdx.x == 0) {
    a.block_scales[blockIdx.y * a.scale_row_stride + blockIdx.x] = ldexpf(1.0f, block_exp);
    if (any && max_exp - min_exp > 14) atomicAdd(a.inexact_blocks, 1);
  }
  const std::int64_t tile_cols = a.cols - col0 < kBlock ? a.cols - col0 : kBlock;
  const std::int64_t tile_rows = a.rows - row0 < kBlock ? a.rows - row0 : kBlock;
  const std::int64_t pairs = tile_rows * (tile_cols / 2);
  for (std::int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const std::int64_t r = row0 + p / (tile_cols / 2), c = col0 + 2 * (p % (tile_cols / 2));
    const unsigned byte = a.codes[r * bytes_per_row + c / 2];
    const int shift = static_cast<int>(a.group_scales[r * groups_per_row + c / kGroup]) - 127 - block_exp;
    const float lo = ldexpf(e2m1(byte & 15u), shift), hi = ldexpf(e2m1(byte >> 4), shift);
    a.out[r * a.cols + c] = __nv_fp8_e4m3(lo).__x;
    a.out[r * a.cols + c + 1] = __nv_fp8_e4m3(hi).__x;
  }
}

__global__ void fp8_to_bf16_kernel(const std::uint8_t* w, const float* scales, std::int64_t stride, std::int64_t rows,
                                   std::int64_t cols, __nv_bfloat16* out) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / cols, c = i % cols;
    __nv_fp8_e4m3 v;
    v.__x = w[i];
    out[i] = __float2bfloat16(static_cast<float>(v) * scales[(r / kBlock) * stride + c / kBlock]);
  }
}

__global__ void fp4_to_bf16_kernel(const std::uint8_t* codes, const std::uint8_t* scales, std::int64_t rows,
                                   std::int64_t cols, __nv_bfloat16* out) {
  const std::int64_t pairs = rows * cols / 2;
  for (std::int64_t p = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = p / (cols / 2), c = 2 * (p % (cols / 2));
    const unsigned byte = codes[p];
    const int e = static_cast<int>(scales[r * (cols / kGroup) + c / kGroup]) - 127;
    out[r * cols + c] = __float2bfloat16(ldexpf(e2m1(byte & 15u), e));
    out[r * cols + c + 1] = __float2bfloat16(ldexpf(e2m1(byte >> 4), e));
  }
}

__device__ __forceinline__ std::uint64_t mix(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_fp8_kernel(std::uint8_t* w, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(static_cast<double>(mix(seed, i) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
    w[i] = __nv_fp8_e4m3(u * 448.0f).__x;
  }
}

__global__ void fill_value_kernel(float* x, std::int64_t n, float v) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = v;
}

__global__ void fill_fp4_kernel(std::uint8_t* codes, std::int64_t n_codes, std::uint8_t* scales, std::int64_t n_scales,
                                int scale_code, std::uint64_t seed) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_codes + n_scales;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t h = mix(seed, i);
    if (i < n_codes) codes[i] = static_cast<std::uint8_t>(h);
    else scales[i - n_codes] = static_cast<std::uint8_t>(scale_code - static_cast<int>(h & 1));
  }
}

unsigned grid_for(std::int64_t n) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, 65536));
}

}  // namespace

void launch_v4_fp4_to_fp8(const V4Fp4ToFp8Args& a, cudaStream_t stream) {
  SLUICE_CHECK(a.rows >= 0 && a.cols > 0 && a.cols % kGroup == 0);
  SLUICE_CHECK(a.scale_row_stride >= (a.cols + kBlock - 1) / kBlock);
  SLUICE_CHECK(a.codes && a.group_scales && a.out && a.block_scales && a.inexact_blocks);
  if (a.rows == 0) return;
  const dim3 grid(static_cast<unsigned>((a.cols + kBlock - 1) / kBlock),
                  static_cast<unsigned>((a.rows + kBlock - 1) / kBlock));
  fp4_to_fp8_kernel<<<grid, kConvertThreads, 0, stream>>>(a);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_fp8_to_bf16(const std::uint8_t* w, const float* scales, std::int64_t scale_row_stride,
                           std::int64_t rows, std::int64_t cols, void* out_bf16, cudaStream_t stream) {
  SLUICE_CHECK(scale_row_stride >= (cols + kBlock - 1) / kBlock);
  if (rows * cols == 0) return;
  fp8_to_bf16_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(w, scales, scale_row_stride, rows, cols,
                                                                      static_cast<__nv_bfloat16*>(out_bf16));
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_fp4_to_bf16(const std::uint8_t* codes, const std::uint8_t* group_scales, std::int64_t rows,
                           std::int64_t cols, void* out_bf16, cudaStream_t stream) {
  SLUICE_CHECK(cols % kGroup == 0);
  if (rows * cols == 0) return;
  fp4_to_bf16_kernel<<<grid_for(rows * cols / 2), kThreads, 0, stream>>>(codes, group_scales, rows, cols,
                                                                          static_cast<__nv_bfloat16*>(out_bf16));
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_fill_fp8_random(std::uint8_t* w, float* scales, std::int64_t scale_row_stride, std::int64_t rows,
                               std::int64_t cols, float scale, std::uint64_t seed, cudaStream_t stream) {
  SLUICE_CHECK(scale > 0.0f);
  if (rows * cols == 0) return;
  fill_fp8_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(w, rows * cols, seed);
  SLUICE_CUDA_CHECK_LAUNCH();
  const std::int64_t n_scales = (rows + kBlock - 1) / kBlock * scale_row_stride;
  const float block = std::ldexp(1.0f, static_cast<int>(std::lround(std::log2(scale / 448.0f))));
  fill_value_kernel<<<grid_for(n_scales), kThreads, 0, stream>>>(scales, n_scales, block);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_fill_fp4_random(std::uint8_t* codes, std::uint8_t* group_scales, std::int64_t rows, std::int64_t cols,
                               float scale, std::uint64_t seed, cudaStream_t stream) {
  SLUICE_CHECK(scale > 0.0f && cols % kGroup == 0);
  if (rows * cols == 0) return;
  const int code = 127 + static_cast<int>(std::lround(std::log2(scale / 6.0f)));
  SLUICE_CHECK(code > 1 && code < 255);
  const std::int64_t n_codes = rows * cols / 2, n_scales = rows * (cols / kGroup);
  fill_fp4_kernel<<<grid_for(n_codes + n_scales), kThreads, 0, stream>>>(codes, n_codes, group_scales, n_scales, code,
                                                                         seed);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
