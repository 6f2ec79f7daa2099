// Scale grids of block-scaled FP8 weights as backends lay them out
// (backend/block_scales.h) and Tensor::row_slice of a scaled weight, against
// grids written out by hand.
#include "sluice/backend/block_scales.h"

#include <gtest/gtest.h>

#include <vector>

namespace sluice {
namespace {

// A [rows, cols] FP8 weight (values unused) whose scales are `scales`, row stride `stride`.
Tensor scaled(std::int64_t rows, std::int64_t cols, const std::vector<float>& scales, std::int64_t stride,
              std::int32_t block = 128) {
  return Tensor{nullptr, DType::f8_e4m3, Shape{rows, cols},
                BlockScales{.data = scales.data(), .block_rows = block, .block_cols = block, .row_stride = stride}};
}

TEST(BlockScales, NumScaleBlocksRoundsUp) {
  EXPECT_EQ(num_scale_blocks(1, 128), 1);
  EXPECT_EQ(num_scale_blocks(128, 128), 1);
  EXPECT_EQ(num_scale_blocks(129, 128), 2);
  EXPECT_EQ(num_scale_blocks(576, 128), 5);  // kv_a_proj: 512 latent + 64 rope rows
}

TEST(BlockScales, OnePartIsPaddedToTheRowAlignment) {
  // [300, 700]: 3 block rows of 6 block columns (the last of each partial).
  std::vector<float> scales(18);
  for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<float>(i + 1);
  const Tensor part = scaled(300, 700, scales, 6);
  const ScaleGrid grid = stacked_scale_grid(std::span<const Tensor>(&part, 1), 4);
  EXPECT_EQ(grid.num_block_rows, 3);
  EXPECT_EQ(grid.num_block_cols, 6);
  EXPECT_EQ(grid.row_stride, 8);
  const std::vector<float> expect = {1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0, 13, 14, 15, 16, 17, 18, 0, 0};
  EXPECT_EQ(stack_block_scales(std::span<const Tensor>(&part, 1), grid), expect);
}

TEST(BlockScales, StackedPartsFollowEachOtherByBlockRow) {
  // gate [256, 256] and up [128, 256] of one expert: 2 + 1 block rows of 2 columns.
  const std::vector<float> gate = {1, 2, 3, 4}, up = {5, 6};
  const Tensor parts[] = {scaled(256, 256, gate, 2), scaled(128, 256, up, 2)};
  const ScaleGrid grid = stacked_scale_grid(parts, 1);
  EXPECT_EQ(grid.num_block_rows, 3);
  EXPECT_EQ(grid.row_stride, 2);
  EXPECT_EQ(stack_block_scales(parts, grid), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // Padded, the same scales move to the start of each padded row.
  const ScaleGrid padded = stacked_scale_grid(parts, 4);
  EXPECT_EQ(stack_block_scales(parts, padded), (std::vector<float>{1, 2, 0, 0, 3, 4, 0, 0, 5, 6, 0, 0}));
}

TEST(BlockScales, ReadsThroughASourceRowStride) {
  // A part whose own scales are already padded (stride 4 for 2 columns).
  const std::vector<float> scales = {1, 2, -1, -1, 3, 4, -1, -1};
  const Tensor part = scaled(200, 130, scales, 4);
  const ScaleGrid grid = stacked_scale_grid(std::span<const Tensor>(&part, 1), 1);
  EXPECT_EQ(stack_block_scales(std::span<const Tensor>(&part, 1), grid), (std::vector<float>{1, 2, 3, 4}));
}

TEST(BlockScales, RowSliceAtABlockRowMovesTheScales) {
  std::vector<float> scales(5 * 4);
  const Tensor w{reinterpret_cast<void*>(std::uintptr_t{4096}), DType::f8_e4m3, Shape{576, 256},
                 BlockScales{.data = scales.data(), .block_rows = 128, .block_cols = 128, .row_stride = 4}};
  const Tensor rope = w.row_slice(512, 64);
  EXPECT_EQ(rope.shape, (Shape{64, 256}));
  EXPECT_EQ(rope.data, reinterpret_cast<void*>(std::uintptr_t{4096 + 512 * 256}));
  EXPECT_EQ(rope.scales.data, scales.data() + 4 * 4);
  EXPECT_EQ(rope.scales.row_stride, 4);
  const Tensor latent = w.row_slice(0, 512);
  EXPECT_EQ(latent.scales.data, scales.data());
  EXPECT_TRUE(w.reshaped(Shape{576, 256}).scales.data == scales.data());
  EXPECT_TRUE(Tensor{}.scales.empty());
}

}  // namespace
}  // namespace sluice
