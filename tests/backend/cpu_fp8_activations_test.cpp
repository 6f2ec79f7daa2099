// The CPU reference's FP8 activation quantization (CpuFp8Activations::e4m3_1x128)
// against a quantizer written here from the e4m3 definition alone: the 127
// positive finite e4m3 values listed from sign/exponent/mantissa, the nearest
// taken with ties to the even code (what cvt.rn.satfinite.e4m3 does). Then
// the CPU ops that use it (matmul, moe_experts) against sums computed here
// from the same definitions, and the switch that keeps short dense matmuls
// unquantized.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "sluice/backend/cpu/cpu_math.h"
#include "sluice/backend/cpu/cpu_ops.h"

namespace sluice {
namespace {

// e4m3 (OCP E4M3FN) code -> value for the positive finite codes 0x00..0x7e.
double e4m3_value(int code) {
  const int exponent = code >> 3, mantissa = code & 7;
  if (exponent == 0) return mantissa * std::ldexp(1.0, -9);
  return (1.0 + mantissa / 8.0) * std::ldexp(1.0, exponent - 7);
}

// Nearest finite e4m3 value of t (ties to the even code, beyond 448 to 448).
double round_e4m3(double t) {
  const double magnitude = std::fabs(t);
  int best = 0;
  for (int code = 1; code <= 0x7e; ++code) {
    const double d = std::fabs(e4m3_value(code) - magnitude), best_d = std::fabs(e4m3_value(best) - magnitude);
    if (d < best_d || (d == best_d && code % 2 == 0)) best = code;
  }
  return std::copysign(e4m3_value(best), t);
}

// One row quantized per 128-column group: scale = amax / 448 in f32, x / scale in f32.
std::vector<float> quantize_independently(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (std::size_t first = 0; first < x.size(); first += 128) {
    const std::size_t end = std::min(x.size(), first + 128);
    float amax = 0.0f;
    for (std::size_t i = first; i < end; ++i) amax = std::fabs(x[i]) > amax ? std::fabs(x[i]) : amax;
    const float scale = amax == 0.0f ? 1.0f : amax / 448.0f;
    for (std::size_t i = first; i < end; ++i) out[i] = static_cast<float>(round_e4m3(x[i] / scale) * scale);
  }
  return out;
}

std::uint64_t next(std::uint64_t& state) {
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return state >> 33;
}

// Uniform in [-1, 1) times 2^[-12, 4): values across e4m3's normal and subnormal range.
float random_value(std::uint64_t& state) {
  const double u = static_cast<double>(next(state) % 2000001) / 1000000.0 - 1.0;
  return static_cast<float>(u * std::ldexp(1.0, static_cast<int>(next(state) % 16) - 12));
}

TEST(CpuFp8Activations, QuantizerMatchesTheE4m3Definition) {
  // Row 1: the group's amax is 448, so the scale is exactly 1 and the values
  // below are e4m3's rounding midpoints as they stand: ties go to the even code.
  std::vector<float> ties(128, 0.0f);
  const float cases[][2] = {{448.0f, 448.0f},     {1.0625f, 1.0f},          {1.1875f, 1.25f},
                            {-1.0625f, -1.0f},    {0.5f / 512, 0.0f},       {1.5f / 512, 2.0f / 512},
                            {440.0f, 448.0f},     {424.0f, 416.0f},         {0.01513671875f, 0.015625f},
                            {3.0f / 1024, 0.00390625f}};
  for (std::size_t i = 0; i < std::size(cases); ++i) ties[i] = cases[i][0];
  std::vector<float> got(ties.size());
  cpu::quantize_fp8_activations(ties.data(), static_cast<std::int64_t>(ties.size()), got.data());
  for (std::size_t i = 0; i < std::size(cases); ++i) EXPECT_EQ(got[i], cases[i][1]) << "value " << cases[i][0];

  // Random rows of 300 columns (two full groups and one of 44), one group all zero.
  std::uint64_t state = 7;
  for (int row = 0; row < 20; ++row) {
    std::vector<float> x(300);
    for (float& v : x) v = random_value(state);
    if (row == 3) std::fill(x.begin() + 128, x.begin() + 256, 0.0f);
    std::vector<float> q(x.size());
    cpu::quantize_fp8_activations(x.data(), static_cast<std::int64_t>(x.size()), q.data());
    const std::vector<float> want = quantize_independently(x);
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(q[i], want[i]) << "row " << row << " column " << i;
    std::vector<float> in_place = x;  // out may alias x
    cpu::quantize_fp8_activations(in_place.data(), static_cast<std::int64_t>(in_place.size()), in_place.data());
    EXPECT_EQ(in_place, q);
  }
}

// An FP8 [rows, cols] weight with 128x128 block scales, its codes and scales owned here.
struct Fp8Weight {
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
  std::int64_t rows = 0, cols = 0, scale_cols = 0;

  Fp8Weight(std::int64_t r, std::int64_t c, std::uint64_t seed) : rows(r), cols(c), scale_cols((c + 127) / 128) {
    std::uint64_t state = seed;
    codes.resize(static_cast<std::size_t>(rows * cols));
    for (auto& code : codes) {
      code = static_cast<std::uint8_t>(next(state) % 0x7f);  // finite magnitudes
      if (next(state) % 2) code |= 0x80;
    }
    scales.resize(static_cast<std::size_t>((rows + 127) / 128 * scale_cols));
    for (float& s : scales) s = static_cast<float>(1 + next(state) % 8) / 4096.0f;
  }
  Tensor tensor() const {
    return Tensor{const_cast<std::uint8_t*>(codes.data()), DType::f8_e4m3, Shape{rows, cols},
                  BlockScales{.data = scales.data(), .block_rows = 128, .block_cols = 128, .row_stride = scale_cols}};
  }
  // The dequantized value from the definitions above.
  double at(std::int64_t r, std::int64_t c) const {
    const std::uint8_t code = codes[static_cast<std::size_t>(r * cols + c)];
    const double v = e4m3_value(code & 0x7f) * ((code & 0x80) ? -1.0 : 1.0);
    return v * scales[static_cast<std::size_t>(r / 128 * scale_cols + c / 128)];
  }
};

Tensor f32_tensor(std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  return Tensor{v.data(), DType::f32, Shape{rows, cols}};
}

double relative_distance(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

TEST(CpuFp8Activations, OnlyTheOptionKeepsFp8Weights) {
  EXPECT_FALSE(make_cpu_ops({.num_threads = 1})->keeps_fp8_block_weights(128, 128));
  EXPECT_TRUE(make_cpu_ops({.num_threads = 1, .fp8_activations = CpuFp8Activations::e4m3_1x128})
                  ->keeps_fp8_block_weights(128, 128));
}

// y = x . W^T with W FP8 (two stacked parts, 384 rows of 300 columns): rows
// above the dense threshold quantize x, rows at or below it do not.
TEST(CpuFp8Activations, MatmulQuantizesAboveTheDenseThreshold) {
  auto ops = make_cpu_ops({.num_threads = 2,
                           .fp8_activations = CpuFp8Activations::e4m3_1x128,
                           .fp8_dense_unquantized_max_rows = 2});
  const Fp8Weight top(256, 300, 11), bottom(128, 300, 12);
  const Tensor parts[] = {top.tensor(), bottom.tensor()};
  auto w = ops->upload_concatenated(parts);
  ASSERT_TRUE(w.ok()) << w.error_message();
  ASSERT_FALSE(w->scales.empty());
  const std::int64_t n = 384, k = 300;
  auto weight_at = [&](std::int64_t r, std::int64_t c) { return r < 256 ? top.at(r, c) : bottom.at(r - 256, c); };
  std::uint64_t state = 5;
  for (std::int64_t rows : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows");
    std::vector<float> x(static_cast<std::size_t>(rows * k)), y(static_cast<std::size_t>(rows * n));
    for (float& v : x) v = random_value(state);
    ops->matmul(f32_tensor(x, rows, k), *w, Tensor{}, f32_tensor(y, rows, n));
    std::vector<double> quantized(y.size()), plain(y.size());
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::vector<float> row(x.begin() + i * k, x.begin() + (i + 1) * k);
      const std::vector<float> q = quantize_independently(row);
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t c = 0; c < k; ++c) {
          quantized[static_cast<std::size_t>(i * n + j)] += q[c] * weight_at(j, c);
          plain[static_cast<std::size_t>(i * n + j)] += row[c] * weight_at(j, c);
        }
    }
    // f32 accumulation over 300 terms: ~1e-6 relative. e4m3 rounding of x
    // moves y by ~3% (3 mantissa bits), so the two sums are far apart.
    const std::vector<double>& want = rows > 2 ? quantized : plain;
    const std::vector<double>& other = rows > 2 ? plain : quantized;
    EXPECT_LT(relative_distance(y, want), 1e-5);
    EXPECT_GT(relative_distance(y, other), 1e-2);
  }
}

// One token through two FP8 experts (hidden 256, intermediate 128): x
// quantized for gate_up, the SwiGLU activation quantized for down.
TEST(CpuFp8Activations, ExpertsQuantizeTheirInputsAndActivations) {
  auto ops = make_cpu_ops({.num_threads = 1, .fp8_activations = CpuFp8Activations::e4m3_1x128});
  const std::int64_t hidden = 256, inter = 128, experts = 2;
  const Fp8Weight gate_up(experts * 2 * inter, hidden, 21), down(experts * hidden, inter, 22);
  std::uint64_t state = 9;
  std::vector<float> x(static_cast<std::size_t>(hidden)), out(static_cast<std::size_t>(hidden), 0.0f);
  for (float& v : x) v = random_value(state) * 64.0f;
  std::vector<std::int32_t> ids = {1, 0};
  std::vector<float> weights = {0.75f, 0.25f};
  const MoeAssignment assignment{.expert_ids = Tensor{ids.data(), DType::i32, Shape{1, 2}},
                                 .expert_weights = Tensor{weights.data(), DType::f32, Shape{1, 2}}};
  const Status status = ops->moe_experts(f32_tensor(x, 1, hidden),
                                         {.gate_up = gate_up.tensor(), .down = down.tensor(), .first_expert = 0},
                                         assignment, f32_tensor(out, 1, hidden));
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<double> want(static_cast<std::size_t>(hidden), 0.0);
  const std::vector<float> xq = quantize_independently(x);
  for (int slot = 0; slot < 2; ++slot) {
    const std::int64_t e = ids[static_cast<std::size_t>(slot)];
    std::vector<float> act(static_cast<std::size_t>(inter));
    for (std::int64_t j = 0; j < inter; ++j) {
      double g = 0.0, u = 0.0;
      for (std::int64_t c = 0; c < hidden; ++c) {
        g += xq[c] * gate_up.at(e * 2 * inter + j, c);
        u += xq[c] * gate_up.at(e * 2 * inter + inter + j, c);
      }
      act[static_cast<std::size_t>(j)] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
    const std::vector<float> aq = quantize_independently(act);
    for (std::int64_t h = 0; h < hidden; ++h) {
      double sum = 0.0;
      for (std::int64_t c = 0; c < inter; ++c) sum += aq[c] * down.at(e * hidden + h, c);
      want[static_cast<std::size_t>(h)] += weights[static_cast<std::size_t>(slot)] * sum;
    }
  }
  // The activation is rounded to f32 before its quantization here and there,
  // but from sums in another order: a value next to an e4m3 midpoint may
  // round the other way (one e4m3 step on one of 128 activations, ~1e-3 of y).
  EXPECT_LT(relative_distance(out, want), 3e-3);
}

}  // namespace
}  // namespace sluice
