#include "sluice/kv/evictor.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(Evictor, LruEvictsOldestFirst) {
  Evictor e(EvictionPolicy::kLru, 8, 0);
  e.insert(3, false);
  e.insert(1, true);  // hits mean nothing to plain LRU
  e.insert(5, false);
  e.remove(1);
  e.insert(1, false);
  e.check_invariants();
  EXPECT_EQ(e.pop_victim(), 3);
  EXPECT_EQ(e.pop_victim(), 5);
  EXPECT_EQ(e.pop_victim(), 1);
  EXPECT_EQ(e.pop_victim(), std::nullopt);
  e.check_invariants();
}

TEST(Evictor, SlruEvictsProbationBeforeProtected) {
  Evictor e(EvictionPolicy::kSlru, 8, 2);
  e.insert(0, true);   // hot, protected
  e.insert(1, false);  // cold
  e.insert(2, false);
  EXPECT_EQ(e.num_protected(), 1);
  EXPECT_EQ(e.pop_victim(), 1);
  EXPECT_EQ(e.pop_victim(), 2);
  EXPECT_EQ(e.pop_victim(), 0);  // only when probation is empty
  e.check_invariants();
}

TEST(Evictor, SlruProtectedOverflowDemotesOldestToProbation) {
  Evictor e(EvictionPolicy::kSlru, 8, 2);
  e.insert(4, false);
  e.insert(0, true);
  e.insert(1, true);
  e.insert(2, true);  // protected holds 2: block 0 goes to probation's newest end
  EXPECT_EQ(e.num_protected(), 2);
  e.check_invariants();
  EXPECT_EQ(e.pop_victim(), 4);
  EXPECT_EQ(e.pop_victim(), 0);
  EXPECT_EQ(e.pop_victim(), 1);
  EXPECT_EQ(e.pop_victim(), 2);
}

Evictor prefix_aware(std::int32_t admit_window_blocks, double hit_weight_blocks) {
  return Evictor(EvictionPolicy::kPrefixAware, 32, 0,
                 PrefixAwareParams{.admit_window_blocks = admit_window_blocks, .hit_weight_blocks = hit_weight_blocks});
}

TEST(Evictor, PrefixAwareEvictsDeepBeforeShallowWhateverTheReleaseOrder) {
  Evictor e = prefix_aware(8, 0.0);
  // A chain freed root first (the reverse of KvCacheManager::free): the deep
  // end must still go first, since it is useless once its parent is gone.
  for (BlockId b = 0; b < 4; ++b) e.insert(b, EvictionSignals{.num_hits = 0, .novel_depth_blocks = b});
  e.check_invariants();
  EXPECT_EQ(e.pop_victim(), 3);
  EXPECT_EQ(e.pop_victim(), 2);
  EXPECT_EQ(e.pop_victim(), 1);
  EXPECT_EQ(e.pop_victim(), 0);
  EXPECT_EQ(e.pop_victim(), std::nullopt);
}

TEST(Evictor, PrefixAwareColdTierGoesBeforeOlderWarmBlocks) {
  Evictor e = prefix_aware(2, 0.0);
  e.insert(5, EvictionSignals{.num_hits = 0, .novel_depth_blocks = 0});  // oldest, but warm
  e.insert(6, EvictionSignals{.num_hits = 0, .novel_depth_blocks = 2});  // past the window: cold
  e.insert(7, EvictionSignals{.num_hits = 1, .novel_depth_blocks = 9});  // deep but hit: warm
  EXPECT_EQ(e.pop_victim(), 6);
  EXPECT_EQ(e.pop_victim(), 7) << "among warm blocks, depth still ranks";
  EXPECT_EQ(e.pop_victim(), 5);
  e.check_invariants();
}

TEST(Evictor, PrefixAwareFrequentBlockSurvivesAScanThenAges) {
  Evictor e = prefix_aware(64, 10.5);
  e.insert(0, EvictionSignals{.num_hits = 1, .novel_depth_blocks = 0});  // release 1, worth 10.5 more releases
  for (BlockId b = 1; b <= 20; ++b) e.insert(b, EvictionSignals{.num_hits = 0, .novel_depth_blocks = 0});
  e.check_invariants();
  // Scan blocks freed at releases 2..11 are older than the hot block's 11.5;
  // those freed at 12..21 are newer: hot popularity fades with the clock.
  for (BlockId b = 1; b <= 10; ++b) EXPECT_EQ(e.pop_victim(), b);
  EXPECT_EQ(e.pop_victim(), 0);
  EXPECT_EQ(e.pop_victim(), 11);
  e.remove(15);
  e.check_invariants();
  EXPECT_FALSE(e.contains(15));
  EXPECT_EQ(e.size(), 8);
}

TEST(Evictor, PrefixAwareMoreHitsSurviveLonger) {
  Evictor e = prefix_aware(64, 4.0);
  e.insert(0, EvictionSignals{.num_hits = 7, .novel_depth_blocks = 0});  // 1 + 4 * 3
  e.insert(1, EvictionSignals{.num_hits = 1, .novel_depth_blocks = 0});  // 2 + 4 * 1
  e.insert(2, EvictionSignals{.num_hits = 0, .novel_depth_blocks = 0});  // 3
  EXPECT_EQ(e.pop_victim(), 2);
  EXPECT_EQ(e.pop_victim(), 1);
  EXPECT_EQ(e.pop_victim(), 0);
}

Evictor reuse_history(double seen_weight_blocks, double depth_weight_blocks) {
  return Evictor(EvictionPolicy::kReuseHistory, 32, 0, PrefixAwareParams{},
                 ReuseHistoryParams{.seen_weight_blocks = seen_weight_blocks, .depth_weight_blocks = depth_weight_blocks});
}

// Score = release clock + seen weight x log2(times seen) - depth weight x depth;
// the lowest goes first. Each expectation below is that formula by hand.
TEST(Evictor, ReuseHistoryRanksByClockSeenCountAndDepth) {
  Evictor e = reuse_history(10.0, 3.0);
  e.insert(0, EvictionSignals{.times_seen = 4, .depth_blocks = 0});  // 1 + 10 x 2 = 21
  e.insert(1, EvictionSignals{.times_seen = 1, .depth_blocks = 0});  // 2
  e.insert(2, EvictionSignals{.times_seen = 2, .depth_blocks = 5});  // 3 + 10 - 15 = -2
  e.insert(3, EvictionSignals{.times_seen = 2, .depth_blocks = 1});  // 4 + 10 - 3 = 11
  e.insert(4, EvictionSignals{.times_seen = 0, .depth_blocks = 0});  // 5 (never seen counts as once)
  e.check_invariants();
  EXPECT_EQ(e.pop_victim(), 2);
  EXPECT_FALSE(e.last_victim_was_cold()) << "no cold tier";
  EXPECT_EQ(e.pop_victim(), 1);
  EXPECT_EQ(e.pop_victim(), 4);
  EXPECT_EQ(e.pop_victim(), 3);
  EXPECT_EQ(e.pop_victim(), 0);
  EXPECT_EQ(e.pop_victim(), std::nullopt);
}

TEST(Evictor, ReuseHistoryOftenSeenBlockOutlivesAScanUntilTheClockPassesIt) {
  Evictor e = reuse_history(6.0, 0.0);
  e.insert(0, EvictionSignals{.times_seen = 2, .depth_blocks = 0});  // 1 + 6 = 7
  for (BlockId b = 1; b <= 10; ++b) e.insert(b, EvictionSignals{.times_seen = 1, .depth_blocks = 0});  // 2..11
  // Scan blocks released at 2..6 rank below 7, those at 7.. (ties by id) above.
  for (BlockId b = 1; b <= 5; ++b) EXPECT_EQ(e.pop_victim(), b);
  EXPECT_EQ(e.pop_victim(), 0);
  EXPECT_EQ(e.pop_victim(), 6);
  e.remove(9);
  e.check_invariants();
  EXPECT_EQ(e.size(), 3);
}

TEST(Evictor, ReuseHistoryChainLeavesDeepestFirstWhateverTheReleaseOrder) {
  Evictor e = reuse_history(0.0, 2.0);
  for (BlockId b = 0; b < 4; ++b) e.insert(b, EvictionSignals{.times_seen = 3, .depth_blocks = b});  // root first
  for (BlockId b = 3; b >= 0; --b) EXPECT_EQ(e.pop_victim(), b);
}

}  // namespace
}  // namespace sluice
