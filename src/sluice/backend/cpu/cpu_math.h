// Scalar helpers shared by the CPU ops: dtype conversion and the f32 dot
// product every reduction goes through.
#pragma once

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

// Rows [row, row + count) of a 2-D weight as f32: the tensor's own memory when
// it is f32, else converted into `buffer`.
inline const float* f32_rows(const Tensor& w, std::int64_t row, std::int64_t count, std::vector<float>& buffer) {
  if (w.dtype == DType::f32) return w.as<const float>() + row * w.cols();
  buffer.resize(static_cast<std::size_t>(count * w.cols()));
  to_f32(w, row * w.cols(), count * w.cols(), buffer.data());
  return buffer.data();
}

}  // namespace sluice::cpu
