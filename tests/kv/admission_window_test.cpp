#include "sluice/kv/admission_window.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(AdmissionWindow, ColdGhostGrowsWarmGhostShrinksWithinBounds) {
  AdmissionWindow w(/*initial_blocks=*/4, /*step_blocks=*/2, /*max_blocks=*/8, /*capacity=*/16);
  EXPECT_EQ(w.blocks(), 4);
  EXPECT_FALSE(w.on_first_miss(100)) << "never evicted: nothing to learn";
  w.on_evicted(1, /*from_cold_tier=*/true);
  w.on_evicted(2, /*from_cold_tier=*/true);
  w.on_evicted(3, /*from_cold_tier=*/true);
  w.on_evicted(4, /*from_cold_tier=*/false);
  EXPECT_TRUE(w.on_first_miss(1));
  EXPECT_EQ(w.blocks(), 6);
  EXPECT_FALSE(w.on_first_miss(1)) << "one lesson per eviction";
  EXPECT_TRUE(w.on_first_miss(2));
  EXPECT_EQ(w.blocks(), 8);
  EXPECT_FALSE(w.on_first_miss(3)) << "already at max";
  EXPECT_EQ(w.blocks(), 8);
  EXPECT_TRUE(w.on_first_miss(4));
  EXPECT_EQ(w.blocks(), 6);
  w.check_invariants();
}

TEST(AdmissionWindow, RemembersOnlyTheLastCapacityEvictions) {
  AdmissionWindow w(2, 1, 100, /*capacity=*/3);
  for (BlockHash h = 1; h <= 5; ++h) w.on_evicted(h, true);
  w.on_evicted(5, true);  // evicted again: one ghost, a stale fifo entry
  w.check_invariants();
  EXPECT_FALSE(w.on_first_miss(1));
  EXPECT_FALSE(w.on_first_miss(2));
  EXPECT_TRUE(w.on_first_miss(3));
  EXPECT_TRUE(w.on_first_miss(4));
  EXPECT_TRUE(w.on_first_miss(5));
  EXPECT_EQ(w.blocks(), 5);
  // The floor is one step.
  for (BlockHash h = 10; h < 20; ++h) {
    w.on_evicted(h, false);
    w.on_first_miss(h);
  }
  EXPECT_EQ(w.blocks(), 1);
  w.check_invariants();
}

}  // namespace
}  // namespace sluice
