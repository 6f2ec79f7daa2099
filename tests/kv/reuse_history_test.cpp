#include "sluice/kv/reuse_history.h"

#include <gtest/gtest.h>

#include <map>

#include "sluice/common/rng.h"

namespace sluice {
namespace {

TEST(ReuseHistory, CountsExactlyWhenKeysAreFew) {
  ReuseHistory h(1 << 12);
  for (int k = 0; k < 5; ++k) h.record(7);
  h.record(11);
  EXPECT_EQ(h.count(7), 5);
  EXPECT_EQ(h.count(11), 1);
  EXPECT_EQ(h.count(12), 0);
}

// Against an exact map (the oracle): never below the truth; with as many
// counters per row as keys, most counts exact and the rest barely off.
TEST(ReuseHistory, NeverUnderestimatesAndRarelyOverestimates) {
  constexpr int kKeys = 4096;
  ReuseHistory h(kKeys);
  std::map<BlockHash, std::int32_t> truth;
  SplitMix64 rng(5);
  for (int i = 0; i < 4 * kKeys; ++i) {
    // A skewed mix: a quarter of the records go to 64 hot keys.
    const BlockHash key = rng.next() % 4 == 0 ? rng.next() % 64 : 1000 + rng.next() % kKeys;
    h.record(key);
    ++truth[key];
  }
  int exact = 0;
  for (const auto& [key, n] : truth) {
    ASSERT_GE(h.count(key), n) << key;
    exact += h.count(key) == n ? 1 : 0;
  }
  EXPECT_GT(exact, static_cast<int>(truth.size()) * 9 / 10);
  EXPECT_EQ(h.memory_bytes(), 4 * kKeys * 2);
}

TEST(ReuseHistory, SaturatesInsteadOfWrapping) {
  ReuseHistory h(64);
  for (int i = 0; i < 70000; ++i) h.record(3);
  EXPECT_EQ(h.count(3), 65535);
}

}  // namespace
}  // namespace sluice
