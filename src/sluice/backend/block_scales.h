// The scale grids of block-scaled FP8 weights (Tensor::scales) as a backend
// lays them out: stacked parts (upload_concatenated) become one grid, and a
// GEMM library may want each block row padded (cuBLASLt's 128x128 weight
// scales: a multiple of 4 floats per block row). Pure host code.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sluice/backend/tensor.h"

namespace sluice {

// ceil(n / block): the blocks covering n rows or columns.
constexpr std::int64_t num_scale_blocks(std::int64_t n, std::int32_t block) { return (n + block - 1) / block; }

// The scale grid of a [rows, cols] weight: block rows and the floats a block row spans.
struct ScaleGrid {
  std::int64_t num_block_rows = 0;
  std::int64_t num_block_cols = 0;
  std::int64_t row_stride = 0;  // >= num_block_cols

  std::int64_t num_floats() const { return num_block_rows * row_stride; }
};

// The grid of `parts` stacked by rows, each block row padded to a multiple of
// `row_alignment` floats. Parts share block sizes and columns, and each part
// but the last ends on a block row (WeightBinder keeps FP8 only then).
ScaleGrid stacked_scale_grid(std::span<const Tensor> parts, std::int64_t row_alignment);

// The parts' scales written into `grid` (padding zeros): what an upload copies.
std::vector<float> stack_block_scales(std::span<const Tensor> parts, const ScaleGrid& grid);

}  // namespace sluice
