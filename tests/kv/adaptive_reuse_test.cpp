// Adaptive reuse: the shadow LRU it learns from (lru_counterfactual.h), the
// evictor re-ranking when the scale moves, and the policy on two workloads
// built so that the oracle is known: one where reuse counts must win over
// recency (a hot prefix between scans larger than the cache, which LRU always
// loses) and one where they must lose (sessions that end, whose counts keep
// dead history in the cache). Adaptive reuse has to do about as well as the
// better of reuse history and LRU on each.
#include "sluice/kv/lru_counterfactual.h"

#include <gtest/gtest.h>

#include <cstdio>
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

TEST(ReuseShadow, KeepsKeysMoreRequestsUsedAndDropsDeepOnesFirst) {
  ReuseHistory counts(64);
  for (int i = 0; i < 4; ++i) counts.record(1);  // key 1: four requests
  // One doubling of uses is worth 10 uses of the clock, one block of depth 3.
  ReuseShadow shadow(/*capacity_blocks=*/3, ReuseHistoryParams{.seen_weight_blocks = 10.0, .depth_weight_blocks = 3.0});
  const std::vector<BlockHash> first = {1, 2};
  shadow.use(first, 0, &counts);  // 1: 1 + 20 = 21; 2: 2 - 3 = -1
  EXPECT_EQ(shadow.prefix_hit(first, 2), 2u);
  shadow.use(std::vector<BlockHash>{3, 4}, 0, &counts);  // 3: 3; 4: 4 - 3 = 1: over capacity, 2 goes (-1)
  EXPECT_EQ(shadow.size(), 3u);
  EXPECT_EQ(shadow.prefix_hit(first, 2), 1u) << "the deep, once-used key went first";
  shadow.use(std::vector<BlockHash>{5, 6}, 0, &counts);  // 5: 5, 6: 3: 4 (1), then 6 or 3 (3) go, never 1 (21)
  EXPECT_EQ(shadow.prefix_hit(std::vector<BlockHash>{1}, 1), 1u) << "the key four requests used stays";
  EXPECT_EQ(shadow.prefix_hit(std::vector<BlockHash>{4}, 1), 0u);
  shadow.check_invariants();
}

// The rule before session 13 learnt from the real cache's hit against the LRU
// shadow's; at scale 0 the cache is LRU, so the two hits are equal and the
// scale never moved again. Two shadows keep learning whatever the cache does.
TEST(LruCounterfactual, DuelLearnsFromTheTwoShadowsWhateverTheCacheHits) {
  const ReuseHistoryParams weights{.seen_weight_blocks = 100.0, .depth_weight_blocks = 0.0};
  LruCounterfactual old_rule(/*initial_scale=*/0.0, /*rate=*/0.05, /*capacity_blocks=*/4);
  LruCounterfactual duel(/*initial_scale=*/0.0, /*rate=*/0.05, /*capacity_blocks=*/4, weights);
  EXPECT_FALSE(old_rule.duels());
  EXPECT_TRUE(duel.duels());
  ReuseHistory counts(64);
  const std::vector<BlockHash> hot = {1, 2, 3};
  BlockHash next = 100;
  for (int round = 0; round < 6; ++round) {
    // The hot prefix, then a scan of 4 one-off keys: LRU loses the prefix every round.
    for (BlockHash k : hot) counts.record(k);
    // The real cache is LRU here (scale 0): it hits what the LRU shadow hits, 0.
    old_rule.on_request(hot, 0, &counts);
    duel.on_request(hot, 0, &counts);
    std::vector<BlockHash> scan = {next, next + 1, next + 2, next + 3, next + 4};
    next += 5;
    for (BlockHash k : scan) counts.record(k);
    old_rule.on_request(scan, 0, &counts);
    duel.on_request(scan, 0, &counts);
  }
  EXPECT_EQ(old_rule.num_lru_hit_blocks(), 0);
  EXPECT_DOUBLE_EQ(old_rule.scale(), 0.0) << "ours == LRU's: no signal";
  // Round 0 the prefix is new (count 1, ranked below the scan); from round 1
  // on its count lifts it over the scan, so rounds 2-5 hit it in the reuse
  // shadow (2 blocks each: never the last).
  EXPECT_EQ(duel.num_reuse_shadow_hit_blocks(), 4 * 2);
  EXPECT_DOUBLE_EQ(duel.scale(), 4 * 2 * 0.05);
  duel.check_invariants();
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
  std::int64_t hit_blocks_from_second_part = 0;  // of requests from second_part on
  double scale = 1.0;
};

// Requests one after another: commit, compute, free (as the trace bench's replay).
Outcome replay(EvictionPolicy eviction, const std::vector<std::vector<TokenId>>& prompts,
               std::size_t second_part = 0) {
  KvCacheManager kv({.num_blocks = 64, .block_size_tokens = kBlock, .eviction = eviction});
  Outcome out;
  SequenceId id = 0;
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    const std::vector<TokenId>& p = prompts[r];
    std::vector<BlockHash> h;
    extend_block_hashes(h, p, kBlock, 0);
    const auto n = static_cast<std::int32_t>(p.size());
    PrefixMatch m = kv.match_prefix(h, n - 1);
    out.hit_blocks += static_cast<std::int64_t>(m.blocks.size());
    if (r >= second_part) out.hit_blocks_from_second_part += static_cast<std::int64_t>(m.blocks.size());
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

// The duel models one cache; with a host tier below, both counterfactuals
// compare the hierarchy's real hit with an LRU of both tiers' size instead.
TEST(AdaptiveReuse, DuelsOnlyWithoutAHostTier) {
  KvCacheManager alone({.num_blocks = 64, .block_size_tokens = kBlock, .eviction = EvictionPolicy::kAdaptiveReuse});
  ASSERT_NE(alone.pool().counterfactual(), nullptr);
  EXPECT_TRUE(alone.pool().counterfactual()->duels());
  KvCacheManager tiered({.num_blocks = 64,
                         .block_size_tokens = kBlock,
                         .eviction = EvictionPolicy::kAdaptiveReuse,
                         .num_host_blocks = 256,
                         .host_eviction = EvictionPolicy::kAdaptiveReuse});
  ASSERT_NE(tiered.pool().counterfactual(), nullptr);
  EXPECT_FALSE(tiered.pool().counterfactual()->duels());
  ASSERT_NE(tiered.host_counterfactual(), nullptr);
  EXPECT_FALSE(tiered.host_counterfactual()->duels());
}

// Traffic that changes: sessions that end (recency wins, the scale falls to
// 0), then a hot prefix between scans (the counts win). At scale 0 the cache
// is LRU and hits what the LRU shadow hits; the scale must still come back.
TEST(AdaptiveReuse, ComesBackToTheCountsWhenTrafficChanges) {
  std::vector<std::vector<TokenId>> prompts = sessions_that_end();
  const std::size_t second_part = prompts.size();
  for (std::vector<TokenId>& p : hot_prefix_between_scans()) prompts.push_back(std::move(p));
  const Outcome lru = replay(EvictionPolicy::kLru, prompts, second_part);
  const Outcome counts = replay(EvictionPolicy::kReuseHistory, prompts, second_part);
  const Outcome adaptive = replay(EvictionPolicy::kAdaptiveReuse, prompts, second_part);
  const Outcome sessions_alone = replay(EvictionPolicy::kAdaptiveReuse, sessions_that_end());
  EXPECT_LT(sessions_alone.scale, 0.5) << "the first part takes the scale down";
  EXPECT_EQ(lru.hit_blocks_from_second_part, 0);
  EXPECT_GE(counts.hit_blocks_from_second_part, 8 * 20);
  EXPECT_GE(adaptive.hit_blocks_from_second_part, counts.hit_blocks_from_second_part * 3 / 4);
  EXPECT_DOUBLE_EQ(adaptive.scale, 1.0);
  std::printf("second part's hit blocks: LRU %lld, reuse history %lld, adaptive %lld\n",
              static_cast<long long>(lru.hit_blocks_from_second_part),
              static_cast<long long>(counts.hit_blocks_from_second_part),
              static_cast<long long>(adaptive.hit_blocks_from_second_part));
}

}  // namespace
}  // namespace sluice
