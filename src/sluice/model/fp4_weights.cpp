#include "sluice/model/fp4_weights.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "sluice/backend/float_convert.h"
#include "sluice/model/fp8_weights.h"

namespace sluice {
namespace {

constexpr float kFp4Max = 6.0f;  // e2m1's largest magnitude

}  // namespace

Shape fp4_packed_shape(const Shape& weight_shape) { return Shape{weight_shape[0], weight_shape[1] / 2}; }

Shape fp4_scale_shape(const Shape& weight_shape) {
  return Shape{weight_shape[0], (weight_shape[1] + kFp4GroupSize - 1) / kFp4GroupSize};
}

Result<std::vector<float>> dequantize_fp4_groups(const Tensor& packed, const Tensor& scale, const Shape& weight_shape,
                                                 const std::string& name) {
  const std::int64_t rows = weight_shape[0], cols = weight_shape[1];
  if (weight_shape.rank != 2 || cols % 2 != 0)
    return Error{fmt::format("FP4 weight '{}' of shape {}: two codes a byte need an even number of inputs", name,
                             weight_shape.str())};
  const Shape packed_shape = fp4_packed_shape(weight_shape), scale_shape = fp4_scale_shape(weight_shape);
  if ((packed.dtype != DType::i8 && packed.dtype != DType::u8) || !(packed.shape == packed_shape))
    return Error{fmt::format("FP4 weight '{}' must be I8 or U8 {} (e2m1 pairs of a {} weight), is {} {}", name,
                             packed_shape.str(), weight_shape.str(), dtype_name(packed.dtype), packed.shape.str())};
  if (scale.dtype != DType::f8_e8m0 || !(scale.shape == scale_shape))
    return Error{fmt::format("the scales of FP4 weight '{}' must be F8_E8M0 {} (one per {} inputs), are {} {}", name,
                             scale_shape.str(), kFp4GroupSize, dtype_name(scale.dtype), scale.shape.str())};
  SLUICE_TRY_ASSIGN(scales, scale_multipliers(scale, name + " scales"));
  const auto* bytes = packed.as<const std::uint8_t>();
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* scale_row = scales.data() + r * scale_shape[1];
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint8_t byte = bytes[r * packed_shape[1] + c / 2];
      const auto code = static_cast<std::uint8_t>(c % 2 == 0 ? byte & 0x0f : byte >> 4);
      out[r * cols + c] = fp4_e2m1_to_f32(code) * scale_row[c / kFp4GroupSize];
    }
  }
  return out;
}

Fp4Groups quantize_fp4_groups(std::span<const float> values, const Shape& shape) {
  const std::int64_t rows = shape[0], cols = shape[1];
  SLUICE_CHECK_EQ(cols % 2, 0);
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(values.size()), rows * cols);
  const std::int64_t groups = fp4_scale_shape(shape)[1];
  Fp4Groups q{std::vector<std::uint8_t>(static_cast<std::size_t>(rows * cols / 2)),
              std::vector<std::uint8_t>(static_cast<std::size_t>(rows * groups))};
  // Above this floor amax / 6 stays an f32 normal, as f32_to_e8m0_ceil needs.
  constexpr float kAmaxFloor = kFp4Max * 0x1p-126f;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t begin = g * kFp4GroupSize, end = std::min(cols, begin + kFp4GroupSize);
      float amax = 0.0f;
      for (std::int64_t c = begin; c < end; ++c) amax = std::max(amax, std::fabs(values[r * cols + c]));
      const std::uint8_t code = amax == 0.0f ? 127 : f32_to_e8m0_ceil(std::max(amax, kAmaxFloor) / kFp4Max);
      q.scale_codes[r * groups + g] = code;
      const float scale = e8m0_to_f32(code);
      for (std::int64_t c = begin; c < end; ++c) {
        // Dividing by a power of two is exact, so the rounding is e2m1's alone.
        const std::uint8_t nibble = f32_to_fp4_e2m1(values[r * cols + c] / scale);
        q.packed[r * cols / 2 + c / 2] |= static_cast<std::uint8_t>(c % 2 == 0 ? nibble : nibble << 4);
      }
    }
  }
  return q;
}

}  // namespace sluice
