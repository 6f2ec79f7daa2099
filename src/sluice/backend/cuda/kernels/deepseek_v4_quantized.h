// DeepSeek-V4's quantized weights on the device (docs/checkpoint-formats.md):
// FP8 e4m3 dense linears with 128x128 block scales, and FP4 routed experts
// (e2m1 pairs, element 2i in the low nibble, one e8m0 scale per 32 inputs of
// a row). The device forward (model/cuda/deepseek_v4_forward.h) keeps FP8 as
// it is for the FP8 GEMMs (fp8_matmul.h, the grouped expert GEMMs of
// moe_kernels.h), and turns FP4 experts into FP8 at load with the kernel
// below, where that is exact. Scale grids here are f32 multipliers
// [ceil(rows / 128), row_stride], the layout Tensor::scales describes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sluice::cuda {

// FP4 -> FP8, per 128x128 block of the [rows, cols] weight (cols a multiple
// of 32): the block's scale is 2^(E - 6), E the largest group exponent
// (scale code - 127) among its groups with a nonzero code, and each value
// e2m1(code) * 2^(e - 127) becomes e4m3(value / block scale).
// Exact when every such group's exponent lies in [E - 14, E]: e2m1's
// magnitudes are {1, 1.5} x 2^{-1..2}, so a group's values span 2^(e - 2) ..
// 1.5 x 2^(e + 2) relative to 2^e, and e4m3 holds 1.5 x 2^j exactly for
// j in [-8, 8] (subnormals from 2^-9) and 1 x 2^j for j in [-9, 8]: with the
// block at 2^(E - 6), the largest value is 6 x 2^6 = 384 <= 448 and the
// smallest exact one needs e >= E - 14. A block whose nonzero groups span
// more than 14 exponents loses its smallest groups' low bits (rounded to
// nearest by the cast): such blocks are counted in *inexact_blocks (device,
// added to, so the caller zeroes it and may sum several weights). Zero groups
// (every code 0 or 8) are zero whatever their scale, so they do not count.
struct V4Fp4ToFp8Args {
  const std::uint8_t* codes = nullptr;         // [rows, cols / 2]
  const std::uint8_t* group_scales = nullptr;  // e8m0 [rows, cols / 32]
  std::int64_t rows = 0, cols = 0;
  std::uint8_t* out = nullptr;       // e4m3 [rows, cols]
  float* block_scales = nullptr;     // [ceil(rows / 128), scale_row_stride]
  std::int64_t scale_row_stride = 0; // >= ceil(cols / 128)
  std::int32_t* inexact_blocks = nullptr;
};
void launch_v4_fp4_to_fp8(const V4Fp4ToFp8Args& args, cudaStream_t stream);

// out[r, c] = bf16(e4m3(w[r, c]) * scales[r / 128, c / 128]): an FP8 weight
// that no FP8 GEMM takes (the bf16 path's input), and the bf16 twin of a
// random FP8 weight for benchmarks. Exact: e4m3 x 2^k is a bf16.
void launch_v4_fp8_to_bf16(const std::uint8_t* w, const float* scales, std::int64_t scale_row_stride,
                           std::int64_t rows, std::int64_t cols, void* out_bf16, cudaStream_t stream);

// out[r, c] = bf16(e2m1(code[r, c]) * 2^(scale[r, c / 32] - 127)), exact:
// FP4 experts that no FP8 kernel takes, or whose blocks e4m3 cannot hold.
void launch_v4_fp4_to_bf16(const std::uint8_t* codes, const std::uint8_t* group_scales, std::int64_t rows,
                           std::int64_t cols, void* out_bf16, cudaStream_t stream);

// Random quantized weights made on the device (benchmarks at V4-Flash's
// width, whose checkpoint does not fit the host), values of magnitude about
// `scale`: FP8 codes of uniform (-448, 448) with every block at the power of
// two nearest scale / 448; FP4 codes uniform over the 16, group scales
// 2^round(log2(scale / 6)) times 1 or 1/2 by group (so blocks mix exponents).
void launch_v4_fill_fp8_random(std::uint8_t* w, float* scales, std::int64_t scale_row_stride, std::int64_t rows,
                               std::int64_t cols, float scale, std::uint64_t seed, cudaStream_t stream);
void launch_v4_fill_fp4_random(std::uint8_t* codes, std::uint8_t* group_scales, std::int64_t rows, std::int64_t cols,
                               float scale, std::uint64_t seed, cudaStream_t stream);

}  // namespace sluice::cuda
