// Adaptive reuse: the shadow LRU it learns from (lru_counterfactual.h), the
// evictor re-ranking when the scale moves, and the policy on two workloads
// built so that the oracle is known: one where reuse counts must win over
// recency (a hot prefix between scans larger than the cache, which LRU always
// loses) and one where they must lose (sessions that end, whose counts keep
// dead history in the cache). Adaptive reuse has to do about as well as the
// better of reuse history and LRU on each.
#include "sluice/kv/lru_counterfactual.h"

#include <gtest/gtest.h>

#include <vector>

#include "sluice/kv/evictor.h"
#include "sluice/kv/kv_cache_manager.h"

namespace sluice {
namespace {

constexpr std::int32_t kBlock = 4;

TEST(LruCounterfactual, ComparesEachRequestsHitWithAnLruOfTheSameSize) {
  LruCounterfactual c(/*initial_scale=*/0.5, /*rate=*/0.01, /*capacity_blocks=*/4);
  const std::vector<BlockHash> a = {1, 2, 3};
  c.on_request(a, 0);  // cold: both miss
  EXPECT_DOUBLE_EQ(c.scale(), 0.5);
  // The shadow holds 1, 2, 3: LRU would hit 2 blocks (never the last one).
  c.on_request(a, 0);
  EXPECT_DOUBLE_EQ(c.scale(), 0.5 - 0.02);
  c.on_request(a, 2);
  EXPECT_DOUBLE_EQ(c.scale(), 0.48);
  // 4 and 5 push 1 out (capacity 4, least recently used first): LRU's hit stops at once.
  c.on_request(std::vector<BlockHash>{4, 5}, 0);
  c.on_request(a, 2);
  EXPECT_DOUBLE_EQ(c.scale(), 0.48 + 0.02);
  EXPECT_EQ(c.num_hit_blocks(), 4);
  EXPECT_EQ(c.num_lru_hit_blocks(), 4);
  c.check_invariants();
}

TEST(LruCounterfactual, StaysWithinZeroAndOne) {
  LruCounterfactual c(1.0, 1.0, 8);
  c.on_request(std::vector<BlockHash>{1, 2, 3}, 2);
  EXPECT_DOUBLE_EQ(c.scale(), 1.0);
  c.on_request(std::vector<BlockHash>{1, 2, 3}, 0);
  EXPECT_DOUBLE_EQ(c.scale(), 0.0);
  c.on_more_keys(std::vector<BlockHash>{9, 10});
  c.check_invariants();
}

TEST(Evictor, ReuseScaleReranksTheBlocksHeld) {
  Evictor e(EvictionPolicy::kAdaptiveReuse, 8, 0, PrefixAwareParams{},
            ReuseHistoryParams{.seen_weight_blocks = 10.0, .depth_weight_blocks = 0.0});
  e.insert(0, EvictionSignals{.times_seen = 8});  // 1 + 30
  e.insert(1, EvictionSignals{.times_seen = 1});  // 2
  e.insert(2, EvictionSignals{.times_seen = 1});  // 3
  // At scale 0 the order is the release clock's (LRU): 0 goes first after all.
  e.set_reuse_scale(0.0);
  e.check_invariants();
  EXPECT_EQ(e.pop_victim(), 0);
  e.set_reuse_scale(1.0);
  e.insert(3, EvictionSignals{.times_seen = 4});  // 4 + 20
  EXPECT_EQ(e.pop_victim(), 1);
  EXPECT_EQ(e.pop_victim(), 2);
  EXPECT_EQ(e.pop_victim(), 3);
}

std::vector<TokenId> block_tokens(TokenId id) { return std::vector<TokenId>(kBlock, id); }

// A prompt of the given block ids (each id its own block contents).
std::vector<TokenId> prompt_of(const std::vector<TokenId>& ids) {
  std::vector<TokenId> t;
  for (TokenId id : ids) {
    const std::vector<TokenId> b = block_tokens(id);
    t.insert(t.end(), b.begin(), b.end());
  }
  return t;
}

struct Outcome {
  std::int64_t hit_blocks = 0;
  double scale = 1.0;
};

// Requests one after another: commit, compute, free (as the trace bench's replay).
Outcome replay(EvictionPolicy eviction, const std::vector<std::vector<TokenId>>& prompts) {
  KvCacheManager kv({.num_blocks = 64, .block_size_tokens = kBlock, .eviction = eviction});
  Outcome out;
  SequenceId id = 0;
  for (const std::vector<TokenId>& p : prompts) {
    std::vector<BlockHash> h;
    extend_block_hashes(h, p, kBlock, 0);
    const auto n = static_cast<std::int32_t>(p.size());
    PrefixMatch m = kv.match_prefix(h, n - 1);
    out.hit_blocks += static_cast<std::int64_t>(m.blocks.size());
    EXPECT_TRUE(kv.commit({.seq_id = ++id, .num_tokens = n, .prefix = std::move(m), .num_queried_tokens = n}).ok());
    kv.cache_computed_blocks(id, h, n);
    kv.free(id);
    kv.check_invariants();
  }
  out.scale = kv.pool().reuse_scale();
  return out;
}

// A hot 8-block prefix, then three 24-block one-off prompts (72 blocks, more
// than the 64 cached): LRU has always lost the prefix when it comes back.
std::vector<std::vector<TokenId>> hot_prefix_between_scans() {
  std::vector<std::vector<TokenId>> out;
  TokenId next_unique = 1000;
  for (int round = 0; round < 30; ++round) {
    std::vector<TokenId> ids = {1, 2, 3, 4, 5, 6, 7, 8, next_unique++};
    out.push_back(prompt_of(ids));
    for (int scan = 0; scan < 3; ++scan) {
      ids.clear();
      for (int b = 0; b < 24; ++b) ids.push_back(next_unique++);
      out.push_back(prompt_of(ids));
    }
  }
  return out;
}

// Sessions two at a time, each six turns resending its whole history plus 4
// new blocks, then never again: recency is right, a session's many uses are
// no sign it returns.
std::vector<std::vector<TokenId>> sessions_that_end() {
  std::vector<std::vector<TokenId>> out;
  for (TokenId pair = 0; pair < 12; ++pair) {
    for (int turn = 0; turn < 6; ++turn) {
      for (TokenId s : {2 * pair, 2 * pair + 1}) {
        std::vector<TokenId> ids;
        for (int b = 0; b < 4 * (turn + 1); ++b) ids.push_back(10000 + 100 * s + b);
        out.push_back(prompt_of(ids));
      }
    }
  }
  return out;
}

TEST(AdaptiveReuse, KeepsTrustingCountsWhereTheyBeatRecency) {
  const auto prompts = hot_prefix_between_scans();
  const Outcome lru = replay(EvictionPolicy::kLru, prompts);
  const Outcome counts = replay(EvictionPolicy::kReuseHistory, prompts);
  const Outcome adaptive = replay(EvictionPolicy::kAdaptiveReuse, prompts);
  EXPECT_EQ(lru.hit_blocks, 0) << "the scans flush the prefix before it returns";
  EXPECT_GE(counts.hit_blocks, 8 * 25) << "the counts keep it";
  EXPECT_GE(adaptive.hit_blocks, counts.hit_blocks * 9 / 10);
  EXPECT_DOUBLE_EQ(adaptive.scale, 1.0);
}

TEST(AdaptiveReuse, FallsBackToRecencyWhereCountsKeepDeadSessions) {
  const auto prompts = sessions_that_end();
  const Outcome lru = replay(EvictionPolicy::kLru, prompts);
  const Outcome counts = replay(EvictionPolicy::kReuseHistory, prompts);
  const Outcome adaptive = replay(EvictionPolicy::kAdaptiveReuse, prompts);
  // LRU hits every earlier turn's history: 4 + 8 + ... + 20 blocks per session.
  EXPECT_EQ(lru.hit_blocks, 24 * (4 + 8 + 12 + 16 + 20));
  EXPECT_LT(counts.hit_blocks, lru.hit_blocks * 3 / 4) << "dead sessions' counts crowd the live ones out";
  EXPECT_GE(adaptive.hit_blocks, lru.hit_blocks * 9 / 10);
  EXPECT_LT(adaptive.scale, 0.5);
}

}  // namespace
}  // namespace sluice
