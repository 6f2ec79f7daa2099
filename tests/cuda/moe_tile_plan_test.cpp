// The host side of the MoE GEMMs' tiles (moe_kernels.h, grouped_gemm_fp8.cu):
// the balanced cut of the swapped kernel's plan, and which tile rows, order
// and kernel each choice of grouped FP8 kernel gets. Host logic only, so it
// runs in CI without a GPU; the device plan itself is checked against the
// same reading in tests/cuda/moe_test.cpp (PlanPairsEachExpertsTiles).
#include <gtest/gtest.h>

#include <cstdint>

#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_kernel.h"
#include "sluice/backend/cuda/kernels/moe_kernels.h"

namespace sluice::cuda {
namespace {

// Every count an expert can hold at these tile rows is cut into tiles of at
// most tile_rows rows, by 16, covering the count with none empty, never more
// tiles than the fixed cut (so moe_max_tiles bounds the balanced plan too),
// and as even as the rounding allows: no tile longer than the even share by
// more than the rounding's 15 rows.
TEST(MoeTilePlan, BalancedTilesCoverEachExpertEvenly) {
  for (const std::int32_t tile_rows : {64, 128, kSwapTileRows}) {
    for (std::int32_t count = 1; count <= 6000; ++count) {
      SCOPED_TRACE(::testing::Message() << count << " slots at " << tile_rows);
      const std::int32_t rows = balanced_tile_rows(count, tile_rows);
      const std::int32_t tiles = balanced_tiles(count, tile_rows);
      const std::int32_t fixed_tiles = (count + tile_rows - 1) / tile_rows;
      ASSERT_LE(rows, tile_rows);
      ASSERT_EQ(rows % 16, 0);
      ASSERT_GE(tiles, 1);
      ASSERT_LE(tiles, fixed_tiles);
      ASSERT_GE(std::int64_t{tiles} * rows, count);       // covered
      ASSERT_LT(std::int64_t{tiles - 1} * rows, count);   // the last tile holds a slot
      if (count <= tile_rows) {
        ASSERT_EQ(tiles, 1);
      }
      // Even, where there are several: each tile at most the even share rounded up to 16
      // (one tile is all the count's, whatever `rows` says).
      if (fixed_tiles > 1) {
        ASSERT_LE(rows, (count + fixed_tiles - 1) / fixed_tiles + 15);
      }
    }
  }
  // The examples the plan's comment gives.
  EXPECT_EQ(balanced_tile_rows(200, kSwapTileRows), 112);
  EXPECT_EQ(balanced_tiles(200, kSwapTileRows), 2);
  EXPECT_EQ(balanced_tile_rows(384, kSwapTileRows), 192);
  EXPECT_EQ(balanced_tile_rows(0, kSwapTileRows), kSwapTileRows);
  EXPECT_EQ(balanced_tiles(0, kSwapTileRows), 0);
}

// The kernel choice sets the plan: 64-slot tiles at decode sizes under every
// kernel; 128-slot tiles in pairs (or odd couples) under the weight
// multicast; the swapped kernel's 192-slot balanced tiles only where A's rows
// are consecutive, its gathered-A case back on 128-slot tiles by expert,
// which no warp-specialised kernel takes (the ring kernel runs them).
TEST(MoeTilePlan, EachKernelGetsItsTilesAndOrder) {
  const GroupedGemmFp8Kernel before = grouped_gemm_fp8_kernel();
  constexpr std::int64_t kDecodeSlots = 512, kPrefillSlots = 32768, kExperts = 256;

  set_grouped_gemm_fp8_kernel(GroupedGemmFp8Kernel::tma_weight_multicast_n192);
  EXPECT_EQ(grouped_gemm_fp8_tile_rows(kDecodeSlots, kExperts, false), 64);
  EXPECT_EQ(grouped_gemm_fp8_tile_rows(kPrefillSlots, kExperts, false), 128);
  EXPECT_EQ(grouped_gemm_fp8_tile_rows(kPrefillSlots, kExperts, true), 128);
  EXPECT_EQ(grouped_gemm_fp8_tile_order(64), MoeTileOrder::by_expert);
  EXPECT_EQ(grouped_gemm_fp8_tile_order(128), MoeTileOrder::paired);
  set_grouped_gemm_fp8_odd_couples(true);
  EXPECT_EQ(grouped_gemm_fp8_tile_order(128), MoeTileOrder::paired_odd_couples);
  set_grouped_gemm_fp8_odd_couples(false);

  set_grouped_gemm_fp8_kernel(GroupedGemmFp8Kernel::swap_ab);
  EXPECT_EQ(grouped_gemm_fp8_tile_rows(kDecodeSlots, kExperts, false), 64);
  EXPECT_EQ(grouped_gemm_fp8_tile_rows(kPrefillSlots, kExperts, false), kSwapTileRows);
  EXPECT_EQ(grouped_gemm_fp8_tile_rows(kPrefillSlots, kExperts, true), 128);
  EXPECT_EQ(grouped_gemm_fp8_tile_order(kSwapTileRows), MoeTileOrder::by_expert_balanced);
  EXPECT_EQ(grouped_gemm_fp8_tile_order(128), MoeTileOrder::by_expert);
  const GroupedGemmFp8Args gathered{.row_of_slot = reinterpret_cast<const std::int32_t*>(16), .tile_rows = 128,
                                    .n = 2048, .k = 7168, .epilogue = GroupedEpilogue::swiglu};
  EXPECT_FALSE(grouped_gemm_fp8_ws_supports(GroupedGemmFp8Kernel::swap_ab, gathered));

  // What the swapped kernel takes: its tiles, consecutive A, n by 64 under swiglu and by 128 under store.
  GroupedGemmFp8Args swapped{.a_scale_stride = kPrefillSlots, .w_rows = kExperts * 2 * 2048,
                             .tile_rows = kSwapTileRows, .n = 2048, .k = 7168,
                             .epilogue = GroupedEpilogue::swiglu};
  EXPECT_TRUE(grouped_gemm_fp8_swap_supports(swapped));
  swapped.n = 2048 + 64;
  EXPECT_TRUE(grouped_gemm_fp8_swap_supports(swapped));
  swapped.epilogue = GroupedEpilogue::store;
  EXPECT_FALSE(grouped_gemm_fp8_swap_supports(swapped));
  swapped.n = 7168;
  EXPECT_TRUE(grouped_gemm_fp8_swap_supports(swapped));
  swapped.tile_rows = 128;
  EXPECT_FALSE(grouped_gemm_fp8_swap_supports(swapped));
  swapped.tile_rows = kSwapTileRows;
  swapped.row_of_slot = gathered.row_of_slot;
  EXPECT_FALSE(grouped_gemm_fp8_swap_supports(swapped));

  set_grouped_gemm_fp8_kernel(before);
}

}  // namespace
}  // namespace sluice::cuda
