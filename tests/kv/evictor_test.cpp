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

}  // namespace
}  // namespace sluice
