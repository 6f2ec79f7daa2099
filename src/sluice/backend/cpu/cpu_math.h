// Scalar helpers shared by the CPU ops: dtype conversion and the f32 dot
// product every reduction goes through.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sluice/backend/float_convert.h"
#include "sluice/backend/tensor.h"

namespace sluice::cpu {

// Converts n elements of any float dtype to f32.
inline void to_f32(const Tensor& t, std::int64_t offset, std::int64_t n, float* out) {
  switch (t.dtype) {
    case DType::f32: std::memcpy(out, t.as<const float>() + offset, static_cast<std::size_t>(n) * 4); return;
    case DType::bf16: {
      const auto* in = t.as<const std::uint16_t>() + offset;
      for (std::int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
      return;
    }
    case DType::f16: {
      const auto* in = t.as<const std::uint16_t>() + offset;
      for (std::int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
      return;
    }
    case DType::f8_e4m3: break;  // block-scaled: dequantized with its scales on load, never raw
    case DType::i32:
    case DType::f8_e8m0:
    case DType::i8:
    case DType::u8: break;  // scales and packed codes: decoded with their weight on load, never raw
  }
  SLUICE_CHECK_MSG(false, std::string("a ") + dtype_name(t.dtype) + " tensor used as plain floats");
}

// Eight independent accumulators so the compiler can vectorise without -ffast-math.
inline float dot(const float* a, const float* b, std::int64_t n) {
  float acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float sum = 0.0f;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (float v : acc) sum += v;
  return sum;
}

// Row `row` of a 2-D weight as f32 into out[cols]: converted, or for an FP8
// weight kept with its block scales (CpuFp8Activations::e4m3_1x128) each
// value times its block's scale, as the loader's dequantization computes it.
inline void weight_row_f32(const Tensor& w, std::int64_t row, float* out) {
  const std::int64_t cols = w.cols();
  if (w.dtype != DType::f8_e4m3) {
    to_f32(w, row * cols, cols, out);
    return;
  }
  SLUICE_CHECK_MSG(!w.scales.empty(), "an FP8 weight without its block scales");
  const auto* values = w.as<const std::uint8_t>() + row * cols;
  const float* scale_row = w.scales.data + row / w.scales.block_rows * w.scales.row_stride;
  for (std::int64_t c = 0; c < cols; ++c) out[c] = fp8_e4m3_to_f32(values[c]) * scale_row[c / w.scales.block_cols];
}

// Rows [row, row + count) of a 2-D weight as f32: the tensor's own memory when
// it is f32, else converted into `buffer`.
inline const float* f32_rows(const Tensor& w, std::int64_t row, std::int64_t count, std::vector<float>& buffer) {
  if (w.dtype == DType::f32) return w.as<const float>() + row * w.cols();
  buffer.resize(static_cast<std::size_t>(count * w.cols()));
  for (std::int64_t r = 0; r < count; ++r) weight_row_f32(w, row + r, buffer.data() + r * w.cols());
  return buffer.data();
}

// The activation quantization of the FP8 GEMMs (kernels/fp8_quantize.cu; DeepSeek's
// dynamic scheme): per group of kFp8ActivationGroup values of a row, scale =
// amax / 448 in f32 (1 for an all-zero group), q = e4m3(x / scale) rounded to
// nearest even and saturating at 448; out = q * scale, the value the GEMM
// multiplies. `out` may be `x`.
inline constexpr std::int64_t kFp8ActivationGroup = 128;
inline constexpr float kFp8E4m3MaxValue = 448.0f;

inline void quantize_fp8_activations(const float* x, std::int64_t n, float* out) {
  for (std::int64_t first = 0; first < n; first += kFp8ActivationGroup) {
    const std::int64_t end = std::min(n, first + kFp8ActivationGroup);
    float amax = 0.0f;
    for (std::int64_t i = first; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = amax > 0.0f ? amax / kFp8E4m3MaxValue : 1.0f;
    for (std::int64_t i = first; i < end; ++i) out[i] = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x[i] / scale)) * scale;
  }
}

}  // namespace sluice::cpu
