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
  // Warps that split one block's K (1: no split); 0 takes fp8_gemv_k_parts().
  // Benchmarks and tests set it to compare or force splits.
  std::int32_t k_parts = 0;
};

// Whether the kernel takes the shape: 1..kFp8GemvMaxRows rows, K a multiple
// of 16 (16-byte weight loads), sizes that fit its 32-bit indices.
bool fp8_gemv_supports(std::int64_t m, std::int64_t n, std::int64_t k);

// The split a shape gets: a pure function of (n, k), at most
// min(kFp8GemvMaxKParts, ceil(k / 128)).
inline constexpr std::int32_t kFp8GemvMaxKParts = 16;
std::int32_t fp8_gemv_k_parts(std::int64_t n, std::int64_t k);

void launch_fp8_gemv(const Fp8GemvArgs& args, const Launch& launch);

}  // namespace sluice::cuda
