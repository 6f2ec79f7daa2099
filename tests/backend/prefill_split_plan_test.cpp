// The split prefill plan (which tiles of a step have their keys spread over
// several blocks, and where), checked here without a GPU: every piece's bounds
// are what the CUDA kernel relies on.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "sluice/backend/prefill_split_plan.h"

namespace sluice {
namespace {

constexpr std::int32_t kH200Sms = 132;

// Tiles of one prefill chunk of `rows` rows over `prefix` cached keys (128-row tiles).
std::vector<PrefillTile> chunk_tiles(std::int32_t seq, std::int32_t prefix, std::int32_t rows) {
  std::vector<PrefillTile> tiles;
  for (std::int32_t r = 0; r < rows; r += 128)
    tiles.push_back({seq, r, prefix + r, prefix + std::min(rows, r + 128)});
  return tiles;
}

// Each tile's pieces: adjacent, covering [0, kv_end) in order, inner bounds on
// key tiles and at or below the tile's first position (so every row of the
// tile sees a key in every piece), none empty.
void expect_valid_pieces(const PrefillSplitPlan& plan, const std::vector<PrefillTile>& split_tiles) {
  ASSERT_EQ(plan.pieces.size(), split_tiles.size() * static_cast<std::size_t>(plan.pieces_per_tile));
  for (std::size_t t = 0; t < split_tiles.size(); ++t) {
    const PrefillTile& tile = split_tiles[t];
    std::int32_t expected_begin = 0;
    for (std::int32_t i = 0; i < plan.pieces_per_tile; ++i) {
      const auto& p = plan.pieces[t * static_cast<std::size_t>(plan.pieces_per_tile) + static_cast<std::size_t>(i)];
      SCOPED_TRACE(::testing::Message() << "tile " << t << " piece " << i);
      EXPECT_EQ(p[0], tile.seq);
      EXPECT_EQ(p[1], tile.row);
      EXPECT_EQ(p[2], expected_begin);
      EXPECT_LT(p[2], p[3]);
      EXPECT_EQ(p[2] % kPrefillSplitKeyAlign, 0);
      EXPECT_LE(p[2], tile.first_position);
      if (i + 1 < plan.pieces_per_tile) {
        EXPECT_EQ(p[3] % kPrefillSplitKeyAlign, 0);
        EXPECT_LE(p[3], tile.first_position);
      } else {
        EXPECT_EQ(p[3], tile.kv_end);
      }
      expected_begin = p[3];
    }
  }
}

TEST(PrefillSplitPlan, ShortChunkOverLongPrefixFillsTheGpu) {
  // 256 rows over 100k keys, 32 heads: 64 blocks for 264 slots -> 4 pieces a tile.
  auto tiles = chunk_tiles(0, 100000, 256);
  const auto original = tiles;
  const PrefillSplitPlan plan = plan_prefill_split(tiles, 32, kH200Sms);
  EXPECT_EQ(plan.pieces_per_tile, 4);
  EXPECT_TRUE(tiles.empty());
  expect_valid_pieces(plan, original);
  // About equal shares of the keys.
  for (const auto& p : plan.pieces) EXPECT_NEAR(p[3] - p[2], 100256 / 4, 128);
}

TEST(PrefillSplitPlan, EnoughTilesOrShortPrefixesAreNotSplit) {
  auto full = chunk_tiles(0, 100000, 1280);  // 10 tiles x 32 heads = 320 blocks >= 264 slots
  EXPECT_EQ(plan_prefill_split(full, 32, kH200Sms).pieces.size(), 0u);
  EXPECT_EQ(full.size(), 10u);
  auto fresh = chunk_tiles(0, 0, 256);  // no cached prefix
  EXPECT_EQ(plan_prefill_split(fresh, 32, kH200Sms).pieces_per_tile, 1);
  auto short_prefix = chunk_tiles(0, kPrefillSplitMinPrefix - 1, 100);
  EXPECT_EQ(plan_prefill_split(short_prefix, 32, kH200Sms).pieces.size(), 0u);
  EXPECT_EQ(short_prefix.size(), 1u);
}

TEST(PrefillSplitPlan, OnlyLongPrefixTilesSplitAndOrderIsKept) {
  // A fresh prompt's two tiles, a chunk over 65k keys, a chunk over 9k keys.
  std::vector<PrefillTile> tiles = chunk_tiles(1, 65536, 300);
  for (const auto& t : chunk_tiles(0, 0, 200)) tiles.push_back(t);
  for (const auto& t : chunk_tiles(2, 9000, 64)) tiles.push_back(t);
  const PrefillSplitPlan plan = plan_prefill_split(tiles, 32, kH200Sms);
  ASSERT_GT(plan.pieces_per_tile, 1);
  // The fresh prompt's tiles stay whole, in order.
  ASSERT_EQ(tiles.size(), 2u);
  EXPECT_EQ(tiles[0].seq, 0);
  EXPECT_EQ(tiles[0].row, 0);
  EXPECT_EQ(tiles[1].row, 128);
  std::vector<PrefillTile> split;
  for (const auto& t : chunk_tiles(1, 65536, 300)) split.push_back(t);
  for (const auto& t : chunk_tiles(2, 9000, 64)) split.push_back(t);
  expect_valid_pieces(plan, split);
  // Pieces keep >= 1024 keys: the 9k prefix bounds the count.
  EXPECT_LE(plan.pieces_per_tile, 9000 / 1024);
}

TEST(PrefillSplitPlan, PieceCountFillsWholeWaves) {
  // 64 blocks on 264 slots: 4 pieces fill one wave; 8 would take two waves of half the work each.
  EXPECT_EQ(prefill_split_pieces_per_tile(2, 32, 100000, kH200Sms), 4);
  // 128 blocks: 2 pieces (256 blocks, one wave).
  EXPECT_EQ(prefill_split_pieces_per_tile(4, 32, 100000, kH200Sms), 2);
  // 200 blocks: 2 or 4 pieces take as long as 1 (2 and 4 waves); 5 pieces are 1000 blocks in
  // 4 waves, 0.8 of the time, within 5% of the best (13 pieces: 10 waves, 0.77).
  EXPECT_EQ(prefill_split_pieces_per_tile(25, 8, 100000, kH200Sms), 5);
  // 256 blocks already fill the slots' one wave: no split gains.
  EXPECT_EQ(prefill_split_pieces_per_tile(8, 32, 100000, kH200Sms), 1);
  // One tile of 8 heads: 16 pieces at most.
  EXPECT_EQ(prefill_split_pieces_per_tile(1, 8, 1 << 20, kH200Sms), 16);
  // A prefix of 2k keys allows 2 pieces at most.
  EXPECT_EQ(prefill_split_pieces_per_tile(1, 8, 2048, kH200Sms), 2);
  EXPECT_EQ(prefill_split_pieces_per_tile(0, 32, 100000, kH200Sms), 1);
}

TEST(PrefillSplitPlan, PartialLastTileAndOddLengths) {
  // 77 rows over 40000 keys (one partial tile), 16 heads; and 129 rows over 20000 (a 1-row tile).
  for (auto [prefix, rows, heads] : {std::array{40000, 77, 16}, std::array{20000, 129, 32}, std::array{4096, 1, 4}}) {
    auto tiles = chunk_tiles(0, prefix, rows);
    const auto original = tiles;
    const PrefillSplitPlan plan = plan_prefill_split(tiles, heads, kH200Sms);
    SCOPED_TRACE(::testing::Message() << rows << " rows over " << prefix);
    ASSERT_GT(plan.pieces_per_tile, 1);
    EXPECT_TRUE(tiles.empty());
    expect_valid_pieces(plan, original);
  }
}

}  // namespace
}  // namespace sluice
