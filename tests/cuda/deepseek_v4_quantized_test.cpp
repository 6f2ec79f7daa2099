// The kernels that keep DeepSeek-V4's quantized weights on the device
// (kernels/deepseek_v4_quantized.h) against the host's decoders
// (model/fp4_weights.h, backend/float_convert.h), bit for bit:
//   - FP4 -> FP8 with 128x128 block scales is exact while a block's nonzero
//     groups span at most 14 exponents (partial blocks at both edges, zero
//     groups with far scales that must not count), and counts exactly the
//     blocks that span 15 or more;
//   - FP4 -> bf16 and FP8 -> bf16 are the host's dequantization, rounded to bf16
//     (exact: every such value is a bf16).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "sluice/backend/cuda/kernels/deepseek_v4_quantized.h"
#include "sluice/backend/float_convert.h"
#include "sluice/model/fp4_weights.h"

namespace sluice {
namespace {

template <class T>
T* to_device(const std::vector<T>& host) {
  T* d = nullptr;
  SLUICE_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), std::max<std::size_t>(host.size() * sizeof(T), 16)) ==
               cudaSuccess);
  SLUICE_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return d;
}
template <class T>
std::vector<T> to_host(const T* d, std::size_t n) {
  std::vector<T> host(n);
  SLUICE_CHECK(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

constexpr std::int64_t kRows = 300, kCols = 320;  // partial 128-blocks in both directions
constexpr std::int64_t kGroups = kCols / 32;

struct Fp4Weight {
  std::vector<std::uint8_t> codes = std::vector<std::uint8_t>(kRows * kCols / 2);
  std::vector<std::uint8_t> scales = std::vector<std::uint8_t>(kRows * kGroups);
};

// Random codes; each group's exponent in [base - spread, base] (spread <= 14: every block exact).
Fp4Weight random_fp4(std::uint32_t seed, int spread) {
  std::mt19937 rng(seed);
  Fp4Weight w;
  for (auto& c : w.codes) c = static_cast<std::uint8_t>(rng());
  for (auto& s : w.scales) s = static_cast<std::uint8_t>(127 - static_cast<int>(rng() % (spread + 1)));
  return w;
}

std::vector<float> host_dequantized(const Fp4Weight& w) {
  const Tensor packed{const_cast<std::uint8_t*>(w.codes.data()), DType::u8, fp4_packed_shape({kRows, kCols})};
  const Tensor scale{const_cast<std::uint8_t*>(w.scales.data()), DType::f8_e8m0, fp4_scale_shape({kRows, kCols})};
  auto values = dequantize_fp4_groups(packed, scale, {kRows, kCols}, "test");
  SLUICE_CHECK_MSG(values.ok(), values.error_message());
  return *values;
}

struct Converted {
  std::vector<float> values;  // e4m3 x block scale, decoded on the host
  std::int32_t inexact_blocks = 0;
};

Converted convert_on_device(const Fp4Weight& w) {
  constexpr std::int64_t kStride = 4;  // >= ceil(320 / 128) = 3, padded as cuBLASLt's grids are
  const std::int64_t block_rows = (kRows + 127) / 128;
  std::uint8_t* codes = to_device(w.codes);
  std::uint8_t* scales = to_device(w.scales);
  std::uint8_t* out = to_device(std::vector<std::uint8_t>(kRows * kCols));
  float* grid = to_device(std::vector<float>(block_rows * kStride));
  std::int32_t* inexact = to_device(std::vector<std::int32_t>{0});
  cuda::launch_v4_fp4_to_fp8({.codes = codes, .group_scales = scales, .rows = kRows, .cols = kCols, .out = out,
                              .block_scales = grid, .scale_row_stride = kStride, .inexact_blocks = inexact},
                             nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto bytes = to_host(out, kRows * kCols);
  const auto block_scales = to_host(grid, block_rows * kStride);
  Converted c;
  c.inexact_blocks = to_host(inexact, 1)[0];
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t col = 0; col < kCols; ++col) {
      const float s = block_scales[(r / 128) * kStride + col / 128];
      EXPECT_EQ(s, std::exp2(std::round(std::log2(s))));  // a power of two, so the product is exact
      c.values.push_back(fp8_e4m3_to_f32(bytes[r * kCols + col]) * s);
    }
  for (void* p : std::initializer_list<void*>{codes, scales, out, grid, inexact}) cudaFree(p);
  return c;
}

std::int64_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

TEST(DeepseekV4Quantized, Fp4ToFp8IsExactWhileABlockSpansAtMost14Exponents) {
  for (int spread : {0, 1, 7, 14}) {
    const Fp4Weight w = random_fp4(100 + spread, spread);
    const Converted c = convert_on_device(w);
    EXPECT_EQ(c.inexact_blocks, 0) << "spread " << spread;
    EXPECT_EQ(mismatches(c.values, host_dequantized(w)), 0) << "spread " << spread;
  }
}

TEST(DeepseekV4Quantized, Fp4ToFp8CountsTheBlocksThatSpanMoreAndZeroGroupsDoNotCount) {
  Fp4Weight w = random_fp4(7, 14);
  // Block (0, 0): a zero group (codes 0 and 8, -0) with a scale 60 exponents away: still exact.
  for (int i = 0; i < 16; ++i) w.codes[5 * (kCols / 2) + i] = (i % 2 == 0) ? 0x00 : 0x88;
  w.scales[5 * kGroups + 0] = 127 - 60;
  // Block (1, 2) (rows 128.., cols 256..; partial): one nonzero group 15 below the block's top.
  w.scales[130 * kGroups + 8] = 127;
  w.scales[131 * kGroups + 9] = 127 - 15;
  w.codes[131 * (kCols / 2) + 9 * 16] = 0x11;  // nonzero: 0.5 in both nibbles
  // Block (2, 1) (rows 256..299, the partial last block row): a spread of 20.
  w.scales[260 * kGroups + 4] = 127 + 3;
  w.scales[299 * kGroups + 7] = 127 - 17;
  w.codes[299 * (kCols / 2) + 7 * 16] = 0x33;
  const Converted c = convert_on_device(w);
  EXPECT_EQ(c.inexact_blocks, 2);
  // Only those two blocks' values may differ from the host's.
  const std::vector<float> want = host_dequantized(w);
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t col = 0; col < kCols; ++col) {
      const bool flagged = (r / 128 == 1 && col / 128 == 2) || (r / 128 == 2 && col / 128 == 1);
      if (!flagged) {
        EXPECT_EQ(c.values[r * kCols + col], want[r * kCols + col]) << r << ", " << col;
      }
    }
}

TEST(DeepseekV4Quantized, Fp4AndFp8ToBf16AreTheHostsDequantization) {
  const Fp4Weight w = random_fp4(3, 30);
  std::uint8_t* codes = to_device(w.codes);
  std::uint8_t* scales = to_device(w.scales);
  std::uint16_t* out = to_device(std::vector<std::uint16_t>(kRows * kCols));
  cuda::launch_v4_fp4_to_bf16(codes, scales, kRows, kCols, out, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got;
  for (std::uint16_t b : to_host(out, kRows * kCols)) got.push_back(bf16_to_f32(b));
  EXPECT_EQ(mismatches(got, host_dequantized(w)), 0);

  // FP8: random e4m3 bytes (NaN codes avoided), power-of-two block scales.
  std::mt19937 rng(5);
  std::vector<std::uint8_t> fp8(kRows * kCols);
  for (auto& b : fp8) {
    b = static_cast<std::uint8_t>(rng());
    if ((b & 0x7f) == 0x7f) b ^= 1;
  }
  constexpr std::int64_t kStride = 3;
  std::vector<float> grid(3 * kStride);
  for (auto& s : grid) s = std::exp2(static_cast<float>(static_cast<int>(rng() % 20) - 10));
  std::uint8_t* fp8_d = to_device(fp8);
  float* grid_d = to_device(grid);
  cuda::launch_v4_fp8_to_bf16(fp8_d, grid_d, kStride, kRows, kCols, out, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto bf16 = to_host(out, kRows * kCols);
  std::int64_t wrong = 0;
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t c = 0; c < kCols; ++c)
      wrong += bf16_to_f32(bf16[r * kCols + c]) != fp8_e4m3_to_f32(fp8[r * kCols + c]) * grid[(r / 128) * kStride + c / 128];
  EXPECT_EQ(wrong, 0);
  for (void* p : std::initializer_list<void*>{codes, scales, out, fp8_d, grid_d}) cudaFree(p);
}

}  // namespace
}  // namespace sluice
