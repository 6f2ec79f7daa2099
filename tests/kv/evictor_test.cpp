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

}  // namespace
}  // namespace sluice
