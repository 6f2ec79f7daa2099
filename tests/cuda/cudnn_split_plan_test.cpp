// The router of cuDNN SDPA steps (cudnn_split_plan.h): host logic only, so it
// runs in CI without a GPU. The attention suite (attention_test.cpp) checks
// the split steps' outputs against a float64 reference on the device.
#include <gtest/gtest.h>

#include <vector>

#include "sluice/backend/cuda/cudnn_split_plan.h"

namespace sluice::cuda {
namespace {

constexpr std::int32_t kSms = 132;

// Every sequence's pieces tile [0, tail_begin) in order, on block boundaries,
// none shorter than the minimum; the tail holds every row of the chunk.
void expect_well_formed(const SdpaRouting& r, const std::vector<SdpaShape>& seqs, std::int32_t block_size) {
  ASSERT_EQ(r.tail_begin.size(), seqs.size());
  std::vector<std::int32_t> covered(seqs.size(), 0);
  for (const SdpaKeyPiece& p : r.pieces) {
    ASSERT_GE(p.sequence, 0);
    ASSERT_LT(p.sequence, static_cast<std::int32_t>(seqs.size()));
    auto& end = covered[static_cast<std::size_t>(p.sequence)];
    EXPECT_EQ(p.key_begin, end) << "pieces of a sequence are adjacent and in order";
    EXPECT_EQ(p.key_begin % block_size, 0);
    EXPECT_EQ(p.key_end % block_size, 0);
    EXPECT_GE(p.key_end - p.key_begin, kSdpaMinPieceKeys);
    end = p.key_end;
  }
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    EXPECT_EQ(covered[i], r.tail_begin[i]) << "sequence " << i;
    EXPECT_LE(r.tail_begin[i], seqs[i].num_keys - seqs[i].num_rows) << "the tail holds every row of the chunk";
    EXPECT_EQ(r.tail_begin[i] % block_size, 0);
  }
}

TEST(CudnnSplitPlan, StepsThatFillTheGpuRunWhole) {
  // 8192-row prompt, 32 heads: 2048 tiles.
  const std::vector<SdpaShape> whole_prompt = {{8192, 8192}};
  EXPECT_EQ(route_sdpa_step(whole_prompt, 32, 16, kSms).route, SdpaRoute::whole);
  // 1024 rows over 100k with 32 heads: 256 tiles, two waves of 132 97% full.
  const std::vector<SdpaShape> chunk = {{1024, 100000}};
  EXPECT_EQ(route_sdpa_step(chunk, 32, 16, kSms).route, SdpaRoute::whole);
  // 640 rows over 2,000 keys: 160 tiles, 61% of two waves, but no prefix to split.
  const std::vector<SdpaShape> short_prefix = {{640, 2000}};
  EXPECT_EQ(route_sdpa_step(short_prefix, 32, 16, kSms).route, SdpaRoute::whole);
}

TEST(CudnnSplitPlan, StepsThatWouldLeaveTheirLastWaveMostlyEmptySplit) {
  // 640 rows over 100k, 32 heads: 160 tiles fill two waves of 132 to 61%
  // (measured at 61% of the 1,024-row rate); 4 pieces make 640 blocks, 97%.
  const std::vector<SdpaShape> seqs = {{640, 100640}};
  const SdpaRouting r = route_sdpa_step(seqs, 32, 16, kSms);
  ASSERT_EQ(r.route, SdpaRoute::split);
  expect_well_formed(r, seqs, 16);
  EXPECT_EQ(r.pieces.size(), 4u);
  EXPECT_EQ(r.tail_begin[0], 100000);
  // 1,100 rows over 16k: 288 tiles, 73% of three waves; 2 pieces, 87% of five.
  const std::vector<SdpaShape> wide = {{1100, 17100}};
  const SdpaRouting w = route_sdpa_step(wide, 32, 16, kSms);
  ASSERT_EQ(w.route, SdpaRoute::split);
  EXPECT_EQ(w.pieces.size(), 2u);
  // 8,192 rows over 100k: 2,048 tiles, 97% of 16 waves: whole.
  const std::vector<SdpaShape> big = {{8192, 108192}};
  EXPECT_EQ(route_sdpa_step(big, 32, 16, kSms).route, SdpaRoute::whole);
}

TEST(CudnnSplitPlan, ShortChunkOverLongPrefixSplitsIntoFullWaves) {
  // The burst's step: 256 rows over 100k, 32 heads: 64 tiles. 3 pieces would
  // leave the second wave of 132 blocks 45% full (192), 5 the third 42%
  // (320); 4 pieces make 256 blocks, 97% of two waves.
  const std::vector<SdpaShape> seqs = {{256, 100256}};
  const SdpaRouting r = route_sdpa_step(seqs, 32, 16, kSms);
  ASSERT_EQ(r.route, SdpaRoute::split);
  expect_well_formed(r, seqs, 16);
  EXPECT_EQ(r.pieces.size(), 4u);
  EXPECT_EQ(r.tail_begin[0], 100000);
  // Equal pieces within one block.
  for (const SdpaKeyPiece& p : r.pieces) EXPECT_NEAR(p.key_end - p.key_begin, 25000, 16);
  // 128 rows (32 tiles): 8 pieces, 256 blocks.
  const std::vector<SdpaShape> narrow = {{128, 100128}};
  EXPECT_EQ(route_sdpa_step(narrow, 32, 16, kSms).pieces.size(), 8u);
}

TEST(CudnnSplitPlan, PiecesStopAtTheMinimumLengthAndTheBlockBoundary) {
  // 64 rows over 9000 keys (prefix 8936, 558 whole blocks of 16 = 8928 keys):
  // at most two pieces of >= 4096 keys; the odd 8 prefix keys go to the tail.
  const std::vector<SdpaShape> seqs = {{64, 9000}};
  const SdpaRouting r = route_sdpa_step(seqs, 8, 16, kSms);
  ASSERT_EQ(r.route, SdpaRoute::split);
  expect_well_formed(r, seqs, 16);
  EXPECT_EQ(r.pieces.size(), 2u);
  EXPECT_EQ(r.tail_begin[0], 8928);
}

TEST(CudnnSplitPlan, SequencesWithoutALongPrefixRideInTheTailCall) {
  // A fresh prompt beside a chunk over a long prefix: only the latter splits.
  const std::vector<SdpaShape> seqs = {{129, 20129}, {100, 100}, {64, 5000}};
  const SdpaRouting r = route_sdpa_step(seqs, 32, 16, kSms);
  ASSERT_EQ(r.route, SdpaRoute::split);
  expect_well_formed(r, seqs, 16);
  EXPECT_EQ(r.tail_begin[1], 0);
  EXPECT_GT(r.tail_begin[0], 0);
  // 5000 - 64 = 4936 prefix keys: one piece of 4928.
  EXPECT_EQ(r.tail_begin[2], 4928);
}

TEST(CudnnSplitPlan, UnderfilledStepsWithShortPrefixesAreDeclined) {
  const std::vector<SdpaShape> seqs = {{256, 2304}, {100, 100}};
  const SdpaRouting r = route_sdpa_step(seqs, 32, 16, kSms);
  EXPECT_EQ(r.route, SdpaRoute::decline);
  EXPECT_TRUE(r.pieces.empty());
}

TEST(CudnnSplitPlan, PiecesPerSequenceAreCapped) {
  // One head, one tile: 264 pieces would be wanted; the cap holds.
  const std::vector<SdpaShape> seqs = {{16, 1 << 20}};
  const SdpaRouting r = route_sdpa_step(seqs, 1, 16, kSms);
  ASSERT_EQ(r.route, SdpaRoute::split);
  expect_well_formed(r, seqs, 16);
  EXPECT_EQ(static_cast<std::int32_t>(r.pieces.size()), kSdpaMaxPiecesPerSequence);
}

}  // namespace
}  // namespace sluice::cuda
