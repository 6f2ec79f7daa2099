#include "sluice/backend/block_scales.h"

#include <algorithm>

namespace sluice {

ScaleGrid stacked_scale_grid(std::span<const Tensor> parts, std::int64_t row_alignment) {
  SLUICE_CHECK(!parts.empty() && row_alignment > 0);
  const BlockScales& first = parts.front().scales;
  SLUICE_CHECK(!first.empty());
  ScaleGrid grid;
  grid.num_block_cols = num_scale_blocks(parts.front().cols(), first.block_cols);
  grid.row_stride = (grid.num_block_cols + row_alignment - 1) / row_alignment * row_alignment;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Tensor& part = parts[i];
    SLUICE_CHECK(!part.scales.empty());
    SLUICE_CHECK(part.scales.block_rows == first.block_rows && part.scales.block_cols == first.block_cols);
    SLUICE_CHECK_EQ(part.cols(), parts.front().cols());
    if (i + 1 < parts.size()) SLUICE_CHECK_EQ(part.rows() % first.block_rows, std::int64_t{0});
    grid.num_block_rows += num_scale_blocks(part.rows(), first.block_rows);
  }
  return grid;
}

std::vector<float> stack_block_scales(std::span<const Tensor> parts, const ScaleGrid& grid) {
  std::vector<float> out(static_cast<std::size_t>(grid.num_floats()), 0.0f);
  std::int64_t block_row = 0;
  for (const Tensor& part : parts) {
    const BlockScales& s = part.scales;
    SLUICE_CHECK_LE(grid.num_block_cols, s.row_stride);
    for (std::int64_t r = 0; r < num_scale_blocks(part.rows(), s.block_rows); ++r, ++block_row)
      std::copy_n(s.data + r * s.row_stride, grid.num_block_cols, out.data() + block_row * grid.row_stride);
  }
  SLUICE_CHECK_EQ(block_row, grid.num_block_rows);
  return out;
}

}  // namespace sluice
