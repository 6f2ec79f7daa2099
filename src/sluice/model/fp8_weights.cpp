#include "sluice/model/fp8_weights.h"

#include <fmt/format.h>

#include "sluice/backend/float_convert.h"

namespace sluice {
namespace {

// The shape and dtype checks of both uses; `f32_only` for scales kept as Tensor::scales.
Status check_scale_tensor(const Tensor& weight, const Tensor& scale, const Fp8BlockQuantization& block,
                          const std::string& name, bool f32_only) {
  if (weight.dtype != DType::f8_e4m3 || weight.shape.rank != 2)
    return Error{fmt::format("tensor '{}' must be a 2-D F8_E4M3 weight", name)};
  const Shape expected = fp8_scale_shape(weight.shape, block);
  const bool dtype_ok = scale.dtype == DType::f32 || (!f32_only && scale.dtype == DType::f8_e8m0);
  if (!dtype_ok || !(scale.shape == expected))
    return Error{fmt::format("the scales of '{}' must be {} {} for {} blocks of {}x{}, are {} {}", name,
                             f32_only ? "F32" : "F32 or F8_E8M0", expected.str(), weight.shape.str(),
                             block.block_rows, block.block_cols, dtype_name(scale.dtype), scale.shape.str())};
  return Ok{};
}

}  // namespace

Shape fp8_scale_shape(const Shape& weight_shape, const Fp8BlockQuantization& block) {
  return Shape{(weight_shape[0] + block.block_rows - 1) / block.block_rows,
               (weight_shape[1] + block.block_cols - 1) / block.block_cols};
}

Status check_fp8_scales(const Tensor& weight, const Tensor& scale_inv, const Fp8BlockQuantization& block,
                        const std::string& name) {
  return check_scale_tensor(weight, scale_inv, block, name, /*f32_only=*/true);
}

BlockScales fp8_block_scales(const Tensor& scale_inv, const Fp8BlockQuantization& block) {
  return BlockScales{.data = scale_inv.as<const float>(),
                     .block_rows = block.block_rows,
                     .block_cols = block.block_cols,
                     .row_stride = scale_inv.cols()};
}

Result<std::vector<float>> scale_multipliers(const Tensor& scale, const std::string& scale_name) {
  const auto n = static_cast<std::size_t>(scale.numel());
  if (scale.dtype == DType::f32) return std::vector<float>(scale.as<const float>(), scale.as<const float>() + n);
  if (scale.dtype != DType::f8_e8m0)
    return Error{fmt::format("scale tensor '{}' is {}, expected F32 or F8_E8M0", scale_name, dtype_name(scale.dtype))};
  const auto* codes = scale.as<const std::uint8_t>();
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (codes[i] == 0xff)
      return Error{fmt::format("scale tensor '{}' holds the E8M0 NaN code 0xff at element {}", scale_name, i)};
    out[i] = e8m0_to_f32(codes[i]);
  }
  return out;
}

Result<std::vector<float>> dequantize_fp8_blocks(const Tensor& weight, const Tensor& scale,
                                                 const Fp8BlockQuantization& block, const std::string& name) {
  SLUICE_TRY(check_scale_tensor(weight, scale, block, name, /*f32_only=*/false));
  SLUICE_TRY_ASSIGN(scales, scale_multipliers(scale, name + " scales"));
  const std::int64_t rows = weight.shape[0], cols = weight.shape[1];
  const std::int64_t scale_cols = scale.shape[1];
  const auto* values = weight.as<const std::uint8_t>();
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* scale_row = scales.data() + (r / block.block_rows) * scale_cols;
    for (std::int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = fp8_e4m3_to_f32(values[r * cols + c]) * scale_row[c / block.block_cols];
  }
  return out;
}

}  // namespace sluice
