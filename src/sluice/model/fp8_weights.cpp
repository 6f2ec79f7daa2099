#include "sluice/model/fp8_weights.h"

#include <fmt/format.h>

#include "sluice/backend/float_convert.h"

namespace sluice {

Shape fp8_scale_shape(const Shape& weight_shape, const Fp8BlockQuantization& block) {
  return Shape{(weight_shape[0] + block.block_rows - 1) / block.block_rows,
               (weight_shape[1] + block.block_cols - 1) / block.block_cols};
}

Status check_fp8_scales(const Tensor& weight, const Tensor& scale_inv, const Fp8BlockQuantization& block,
                        const std::string& name) {
  if (weight.dtype != DType::f8_e4m3 || weight.shape.rank != 2)
    return Error{fmt::format("tensor '{}' must be a 2-D F8_E4M3 weight", name)};
  const Shape expected = fp8_scale_shape(weight.shape, block);
  if (scale_inv.dtype != DType::f32 || !(scale_inv.shape == expected))
    return Error{fmt::format("tensor '{}_scale_inv' must be F32 {} for {} blocks of {}x{}, is {} {}", name,
                             expected.str(), weight.shape.str(), block.block_rows, block.block_cols,
                             dtype_name(scale_inv.dtype), scale_inv.shape.str())};
  return Ok{};
}

BlockScales fp8_block_scales(const Tensor& scale_inv, const Fp8BlockQuantization& block) {
  return BlockScales{.data = scale_inv.as<const float>(),
                     .block_rows = block.block_rows,
                     .block_cols = block.block_cols,
                     .row_stride = scale_inv.cols()};
}

Result<std::vector<float>> dequantize_fp8_blocks(const Tensor& weight, const Tensor& scale_inv,
                                                 const Fp8BlockQuantization& block, const std::string& name) {
  SLUICE_TRY(check_fp8_scales(weight, scale_inv, block, name));
  const Shape expected = fp8_scale_shape(weight.shape, block);
  const std::int64_t rows = weight.shape[0], cols = weight.shape[1];
  const std::int64_t scale_cols = expected[1];
  const auto* values = weight.as<const std::uint8_t>();
  const auto* scales = scale_inv.as<const float>();
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* scale_row = scales + (r / block.block_rows) * scale_cols;
    for (std::int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = fp8_e4m3_to_f32(values[r * cols + c]) * scale_row[c / block.block_cols];
  }
  return out;
}

}  // namespace sluice
