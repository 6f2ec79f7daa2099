#include "sluice/kv/block_pool.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(BlockPool, AllocateReleaseAndRefCounts) {
  BlockPool pool(4, EvictionPolicy::kLru, 0);
  const std::vector<BlockId> a = pool.allocate(3);
  EXPECT_EQ(a, (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(pool.num_available_blocks(), 1);
  for (BlockId b : a) EXPECT_EQ(pool.ref_count(b), 1);
  pool.release(a[1]);
  EXPECT_EQ(pool.ref_count(a[1]), 0);
  EXPECT_EQ(pool.num_available_blocks(), 2);
  pool.check_invariants();
}

TEST(BlockPool, CachedBlockSurvivesReleaseUntilEvicted) {
  BlockPool pool(2, EvictionPolicy::kLru, 0);
  const std::vector<BlockId> a = pool.allocate(2);
  EXPECT_TRUE(pool.register_hash(a[0], 111));
  EXPECT_FALSE(pool.register_hash(a[1], 111)) << "a second block with the same key stays uncached";
  pool.release(a[0]);
  pool.release(a[1]);
  EXPECT_EQ(pool.num_cached_free_blocks(), 1);
  EXPECT_EQ(pool.lookup(111), a[0]);
  // A hit takes it back out of the evictor.
  pool.touch(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  EXPECT_EQ(pool.num_cached_free_blocks(), 0);
  pool.release(a[0]);
  pool.check_invariants();
  // Allocation prefers the uncached free block, then evicts.
  const std::vector<BlockId> b = pool.allocate(1);
  EXPECT_EQ(b[0], a[1]);
  EXPECT_EQ(pool.lookup(111), a[0]);
  const std::vector<BlockId> c = pool.allocate(1);
  EXPECT_EQ(c[0], a[0]);
  EXPECT_EQ(pool.lookup(111), std::nullopt);
  EXPECT_EQ(pool.counters().num_evicted_blocks, 1);
  pool.check_invariants();
}

// The reuse history outlives the blocks: a key evicted and computed again
// remembers every request that used it, and that count ranks its release.
TEST(BlockPool, ReuseHistoryRemembersKeysPastTheirEviction) {
  BlockPool pool(2, EvictionPolicy::kReuseHistory, 0, {}, ReuseHistoryParams{.seen_weight_blocks = 100.0}, 256);
  std::vector<BlockId> a = pool.allocate(2);
  EXPECT_TRUE(pool.register_hash(a[0], 111));  // a request computes 111
  EXPECT_FALSE(pool.register_hash(a[1], 111)) << "another computes it too: a second use, not cached twice";
  pool.release(a[1]);
  pool.touch(a[0]);  // a third request hits it
  EXPECT_EQ(pool.times_seen(111), 3);
  pool.release(a[0]);
  pool.release(a[0]);
  // Both blocks taken: 111 is evicted, its count stays.
  a = pool.allocate(2);
  EXPECT_FALSE(pool.lookup(111).has_value());
  EXPECT_EQ(pool.times_seen(111), 3);
  EXPECT_TRUE(pool.register_hash(a[0], 111));
  EXPECT_TRUE(pool.register_hash(a[1], 222));
  EXPECT_EQ(pool.times_seen(111), 4);
  EXPECT_EQ(pool.times_seen(222), 1);
  // 111 was released first but has been used 4 times (2 doublings x 100
  // releases): 222, newer but used once, is evicted first.
  pool.release(a[0], 0, 0);
  pool.release(a[1], 0, 0);
  pool.check_invariants();
  const std::vector<BlockId> b = pool.allocate(1);
  EXPECT_EQ(b[0], a[1]);
  EXPECT_TRUE(pool.lookup(111).has_value());
  EXPECT_FALSE(pool.lookup(222).has_value());
  pool.check_invariants();
}

}  // namespace
}  // namespace sluice
