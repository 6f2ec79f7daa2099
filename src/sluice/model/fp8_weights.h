// FP8 block-scaled weights (DeepSeek's quantization_config): a float8 e4m3
// [rows, cols] weight and a scale tensor of one multiplier per [block_rows,
// block_cols] block, partial blocks at the edges:
//     w[r][c] = fp8(weight[r][c]) * scale[r / block_rows][c / block_cols]
// DeepSeek-V3 names it `<name>_scale_inv` and stores F32; DeepSeek-V4 names it
// `<linear>.scale` and stores F8_E8M0 powers of two (V4-Flash, V4-Pro) or F32
// (the -Base checkpoints). Backends without FP8 GEMMs (the CPU reference) take
// the dequantized f32; the others take the FP8 values with F32 scales on
// Tensor::scales.
#pragma once

#include <string>
#include <vector>

#include "sluice/backend/tensor.h"
#include "sluice/common/result.h"
#include "sluice/model/config.h"

namespace sluice {

// The shape the scales must have for a weight of `weight_shape`.
Shape fp8_scale_shape(const Shape& weight_shape, const Fp8BlockQuantization& block);

// Whether scale_inv fits `weight` as Tensor::scales: an F8_E4M3 2-D weight and
// F32 scales of fp8_scale_shape; the error names `name`.
Status check_fp8_scales(const Tensor& weight, const Tensor& scale_inv, const Fp8BlockQuantization& block,
                        const std::string& name);

// The checkpoint's F32 scale_inv as the Tensor::scales of its weight.
BlockScales fp8_block_scales(const Tensor& scale_inv, const Fp8BlockQuantization& block);

// A scale tensor's multipliers in f32: F32 as stored, F8_E8M0 decoded
// (2^(code - 127), exact). An E8M0 NaN (0xff) or another dtype is refused,
// naming `scale_name`: a NaN scale would silently poison its whole block.
Result<std::vector<float>> scale_multipliers(const Tensor& scale, const std::string& scale_name);

// Dequantizes into f32 ([rows, cols], row-major), each element in one f32
// multiplication; `scale` is F32 or F8_E8M0. Errors name `name` when the
// shapes or dtypes disagree.
Result<std::vector<float>> dequantize_fp8_blocks(const Tensor& weight, const Tensor& scale,
                                                 const Fp8BlockQuantization& block, const std::string& name);

}  // namespace sluice
