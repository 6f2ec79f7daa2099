// FP4 routed experts (DeepSeek-V4 `expert_dtype: fp4`, the OCP MXFP4 layout):
// a [rows, cols] weight (rows = outputs, cols = inputs, K) is stored as
//   <linear>.weight  I8 (or U8) [rows, cols / 2]: e2m1 codes two a byte along
//                    K, element 2i in the low nibble, 2i + 1 in the high one;
//   <linear>.scale   F8_E8M0 [rows, ceil(cols / kFp4GroupSize)]: one power of
//                    two per group of kFp4GroupSize inputs of a row;
//     w[r][c] = e2m1(code[r][c]) * 2^(scale[r][c / kFp4GroupSize] - 127)
// Every such product is exact in f32 (a 2-bit significand times a power of
// two), so dequantizing on load loses nothing. docs/checkpoint-formats.md has
// the sources.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sluice/backend/tensor.h"
#include "sluice/common/result.h"

namespace sluice {

// Inputs per FP4 scale: 32. DeepSeek's own converter shipped with V4-Flash
// (inference/convert.py, cast_e2m1fn_to_e4m3fn) sets fp4_block_size = 32 and
// asserts scale.size(1) == in_dim // 32; write-ups that read the published
// safetensors headers (V4-Flash and its 0731 snapshot) report one E8M0 scale
// per 32 inputs, and vLLM, SGLang and tokenspeed load V4 experts as MXFP4/32.
// The one claim of 16 (spec §6, for 0731) matches no header anyone quotes;
// 16 is the NVFP4 group and V4.1's FP4 KV-cache group, not these experts'.
inline constexpr std::int64_t kFp4GroupSize = 32;

// The stored shapes for a [rows, cols] weight (cols even).
Shape fp4_packed_shape(const Shape& weight_shape);
Shape fp4_scale_shape(const Shape& weight_shape);

// Dequantizes the [rows, cols] weight `weight_shape` from its packed codes
// (I8 or U8 of fp4_packed_shape) and scales (F8_E8M0 of fp4_scale_shape) into
// f32, row-major. Errors name `name` when a shape or dtype disagrees or a
// scale is the E8M0 NaN.
Result<std::vector<float>> dequantize_fp4_groups(const Tensor& packed, const Tensor& scale, const Shape& weight_shape,
                                                 const std::string& name);

// What make-model writes for a weight: the bytes of both tensors.
struct Fp4Groups {
  std::vector<std::uint8_t> packed;       // [rows, cols / 2]
  std::vector<std::uint8_t> scale_codes;  // [rows, ceil(cols / kFp4GroupSize)], e8m0
};

// Quantizes a [rows, cols] f32 weight (cols even) per group: scale =
// 2^ceil(log2(amax / 6)) so the group's largest value lands on e2m1's 6 (an
// all-zero group takes scale 1), codes = e2m1(value / scale) rounded to
// nearest, ties to even.
Fp4Groups quantize_fp4_groups(std::span<const float> values, const Shape& shape);

}  // namespace sluice
