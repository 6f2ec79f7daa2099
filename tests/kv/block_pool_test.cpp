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

}  // namespace
}  // namespace sluice
