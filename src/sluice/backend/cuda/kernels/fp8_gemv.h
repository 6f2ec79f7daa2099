// The decode-size GEMV for FP8 e4m3 weights with 128x128 block scales (the
// DeepSeek checkpoints' dense linears, kept FP8 on the device): out[m, n] =
// x[m, :] . w[n, :] for m <= kFp8GemvMaxRows bf16 activation rows, bf16
// activations as they are, f32 sums, each 128-wide K block's partial sum
// times its scale. Split over K so that weights of few rows still fill the
// device (fp8_gemv.cu says how). Pure C++ types, for the host compiler.
#pragma once

#include <cstdint>

#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {

inline constexpr std::int64_t kFp8GemvMaxRows = 16;

struct Fp8GemvArgs {
  const void* x = nullptr;           // bf16 [m, k], rows contiguous
  const std::uint8_t* w = nullptr;   // e4m3 [n, k], rows contiguous
  const float* w_scales = nullptr;   // [ceil(n / 128), w_scale_row_stride], one per 128x128 block
  std::int64_t w_scale_row_stride = 0;
  std::int64_t m = 0, n = 0, k = 0;
  void* out = nullptr;  // [m, n], out_dt (bf16 or f32)
  Dt out_dt{};
  // Warps that split K for each 16 weight rows (1: no split) and stripes of
  // 16 rows a block (sharing their activations through L1); 0 takes
  // fp8_gemv_split()'s. Benchmarks and tests set them to compare or force splits.
  std::int32_t k_parts = 0;
  std::int32_t stripes = 0;
};

// Whether the kernel takes the shape: 1..kFp8GemvMaxRows rows, K a multiple
// of 16 (16-byte weight loads), sizes that fit its 32-bit indices.
bool fp8_gemv_supports(std::int64_t m, std::int64_t n, std::int64_t k);

// A block is k_parts x stripes warps, at most kFp8GemvMaxBlockWarps.
inline constexpr std::int32_t kFp8GemvMaxBlockWarps = 16;
struct Fp8GemvSplit {
  std::int32_t k_parts = 1, stripes = 1;
};
// What the split depends on besides the shape: the device's multiprocessors
// and how many blocks of each size (warps 1..16) one of them holds.
struct Fp8GemvOccupancy {
  int num_sms = 0;
  int blocks_per_sm[kFp8GemvMaxBlockWarps + 1] = {};  // [warps a block]
};
// The split a shape gets: a pure function of (m, n, k) and the occupancy
// (fp8_gemv.cu says the cost it minimises); k_parts <= ceil(k / 128).
Fp8GemvSplit fp8_gemv_split(std::int64_t m, std::int64_t n, std::int64_t k, const Fp8GemvOccupancy& occupancy);

// Asks the device's occupancy table (fp8_gemv_split's input) now, outside
// any graph capture: Fp8Matmul's constructor calls it. Idempotent.
void prepare_fp8_gemv();
// The split launch_fp8_gemv() takes for the shape (k_parts and stripes 0)
// on the current device.
Fp8GemvSplit fp8_gemv_split_on_device(std::int64_t m, std::int64_t n, std::int64_t k);

void launch_fp8_gemv(const Fp8GemvArgs& args, const Launch& launch);

}  // namespace sluice::cuda
