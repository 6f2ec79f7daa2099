// FP8 block-scaled weights (DeepSeek's quantization_config): a float8 e4m3
// [rows, cols] weight and its `<name>_scale_inv` f32 tensor of one multiplier
// per [block_rows, block_cols] block, partial blocks at the edges:
//     w[r][c] = fp8(weight[r][c]) * scale_inv[r / block_rows][c / block_cols]
// Backends without FP8 GEMMs (the CPU reference) take the dequantized f32;
// the others take the FP8 values with the scales on Tensor::scales.
#pragma once

#include <string>
#include <vector>

#include "sluice/backend/tensor.h"
#include "sluice/common/result.h"
#include "sluice/model/config.h"

namespace sluice {

// The shape scale_inv must have for a weight of `weight_shape`.
Shape fp8_scale_shape(const Shape& weight_shape, const Fp8BlockQuantization& block);

// Whether scale_inv fits `weight` (an F8_E4M3 2-D weight and F32 scales of
// fp8_scale_shape); the error names `name`.
Status check_fp8_scales(const Tensor& weight, const Tensor& scale_inv, const Fp8BlockQuantization& block,
                        const std::string& name);

// The checkpoint's scale_inv as the Tensor::scales of its weight.
BlockScales fp8_block_scales(const Tensor& scale_inv, const Fp8BlockQuantization& block);

// Dequantizes into f32 ([rows, cols], row-major), each element in one f32
// multiplication. Errors name `name` when the shapes or dtypes disagree.
Result<std::vector<float>> dequantize_fp8_blocks(const Tensor& weight, const Tensor& scale_inv,
                                                 const Fp8BlockQuantization& block, const std::string& name);

}  // namespace sluice
