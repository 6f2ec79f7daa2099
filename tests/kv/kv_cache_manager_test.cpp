#include "sluice/kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace sluice {
namespace {

constexpr std::int32_t kBlock = 4;

std::vector<TokenId> iota_tokens(std::int32_t n, TokenId first) {
  std::vector<TokenId> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<BlockHash> hashes_of(const std::vector<TokenId>& tokens, std::uint64_t salt = 0) {
  std::vector<BlockHash> h;
  extend_block_hashes(h, tokens, kBlock, salt);
  return h;
}

KvCacheConfig config(std::int32_t num_blocks, EvictionPolicy eviction = EvictionPolicy::kLru) {
  return {.num_blocks = num_blocks, .block_size_tokens = kBlock, .eviction = eviction, .slru_protected_fraction = 0.5};
}

TEST(BlockHash, ChainDependsOnEverythingBefore) {
  const std::vector<TokenId> a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<TokenId> b = a;
  b[0] = 9;
  const auto ha = hashes_of(a), hb = hashes_of(b);
  ASSERT_EQ(ha.size(), 2u);
  EXPECT_NE(ha[1], hb[1]) << "same second block, different first: different key";
  EXPECT_NE(hashes_of(a, 1)[0], ha[0]) << "the extra key changes every key";
  EXPECT_EQ(hashes_of(a), ha);
  EXPECT_EQ(hashes_of({1, 2, 3}).size(), 0u) << "partial blocks have no key";
}

TEST(KvCacheManager, SecondRequestHitsTheSharedPrefix) {
  KvCacheManager kv(config(16));
  const auto prompt = iota_tokens(10, 100);  // 2 full blocks + 2 tokens
  const auto h = hashes_of(prompt);
  ASSERT_TRUE(kv.commit({.seq_id = 1, .num_tokens = 10, .num_queried_tokens = 10}).ok());
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  kv.cache_computed_blocks(1, h, 10);
  kv.check_invariants();

  const PrefixMatch m = kv.match_prefix(h, 9);
  EXPECT_EQ(m.num_cached_tokens, 8);
  EXPECT_EQ(m.blocks, (std::vector<BlockId>{kv.block_table(1)[0], kv.block_table(1)[1]}));
  ASSERT_TRUE(kv.commit({.seq_id = 2, .num_tokens = 10, .prefix = m, .num_queried_tokens = 10}).ok());
  EXPECT_EQ(kv.pool().ref_count(m.blocks[0]), 2);
  EXPECT_EQ(kv.counters().num_hit_tokens, 8);
  EXPECT_EQ(kv.counters().num_queried_tokens, 20);
  kv.check_invariants();

  // The cap: a prompt that is exactly the cached blocks still computes its last token.
  EXPECT_EQ(kv.match_prefix(h, 8).num_cached_tokens, 8);
  EXPECT_EQ(kv.match_prefix(h, 7).num_cached_tokens, 4);

  kv.free(1);
  kv.free(2);
  kv.check_invariants();
  EXPECT_EQ(kv.num_available_blocks(), 16);
  EXPECT_EQ(kv.num_cached_free_blocks(), 2);
  EXPECT_EQ(kv.match_prefix(h, 9).num_cached_tokens, 8) << "freed but cached blocks stay reusable";
}

TEST(KvCacheManager, ExtendProbeContinuesWhereTheLastProbeStopped) {
  KvCacheManager kv(config(16));
  const auto prompt = iota_tokens(17, 5);  // 4 full blocks + 1
  const auto h = hashes_of(prompt);
  PrefixProbe probe = kv.probe_prefix(h, 16);
  EXPECT_EQ(probe.num_hit_blocks, 0);
  // Another sequence computes the first 10 tokens (2 full blocks) of the same prompt.
  ASSERT_TRUE(kv.commit({.seq_id = 1, .num_tokens = 10}).ok());
  kv.cache_computed_blocks(1, h, 10);
  const std::int64_t evictions = kv.num_evicted_blocks();
  kv.extend_probe(h, 16, probe);
  EXPECT_EQ(probe.num_hit_blocks, 2);
  EXPECT_EQ(probe.num_hit_free_blocks, 0) << "in use by sequence 1";
  EXPECT_EQ(kv.num_evicted_blocks(), evictions);
  const PrefixProbe fresh = kv.probe_prefix(h, 16);
  EXPECT_EQ(fresh.num_hit_blocks, probe.num_hit_blocks);
  kv.free(1);
  EXPECT_EQ(kv.probe_prefix(h, 16).num_hit_free_blocks, 2);
}

TEST(KvCacheManager, CommitFailsWithoutChangingAnything) {
  KvCacheManager kv(config(2));
  ASSERT_TRUE(kv.commit({.seq_id = 1, .num_tokens = 5}).ok());
  const Status s = kv.commit({.seq_id = 2, .num_tokens = 5});
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(kv.has_sequence(2));
  EXPECT_EQ(kv.num_available_blocks(), 0);
  kv.check_invariants();
}

TEST(KvCacheManager, DisabledCachingNeverHits) {
  KvCacheConfig c = config(8);
  c.enable_prefix_caching = false;
  KvCacheManager kv(c);
  const auto prompt = iota_tokens(8, 0);
  ASSERT_TRUE(kv.commit({.seq_id = 1, .num_tokens = 8}).ok());
  kv.cache_computed_blocks(1, hashes_of(prompt), 8);
  EXPECT_EQ(kv.match_prefix(hashes_of(prompt), 7).num_cached_tokens, 0);
  kv.free(1);
  EXPECT_EQ(kv.num_cached_free_blocks(), 0);
}

// Runs `hot` (hit twice) then a cold prompt that needs all other blocks and
// some more; reports whether `hot` still hits afterwards.
std::int32_t hot_prefix_after_cold_flood(EvictionPolicy eviction, double prefix_hit_weight = 0.5) {
  KvCacheConfig c = config(12, eviction);
  c.prefix_hit_weight = prefix_hit_weight;
  KvCacheManager kv(c);
  const auto hot = iota_tokens(16, 0);  // 4 blocks
  const auto hot_h = hashes_of(hot);
  for (SequenceId id : {1, 2}) {
    const PrefixMatch m = kv.match_prefix(hot_h, 15);
    EXPECT_TRUE(kv.commit({.seq_id = id, .num_tokens = 16, .prefix = m, .num_queried_tokens = 16}).ok());
    kv.cache_computed_blocks(id, hot_h, 16);
    kv.free(id);
  }
  // Two cold prompts of 8 blocks each: together more than the 8 blocks nobody
  // has cached, so the second one must evict.
  for (SequenceId id : {10, 11}) {
    const auto cold = iota_tokens(32, 1000 * static_cast<TokenId>(id));
    EXPECT_TRUE(kv.commit({.seq_id = id, .num_tokens = 32}).ok());
    kv.cache_computed_blocks(id, hashes_of(cold), 32);
    kv.free(id);
    kv.check_invariants();
  }
  return kv.match_prefix(hot_h, 15).num_cached_tokens;
}

TEST(KvCacheManager, SlruKeepsHotPrefixThroughColdFloodLruDoesNot) {
  EXPECT_EQ(hot_prefix_after_cold_flood(EvictionPolicy::kSlru), 12);
  // Prefix-aware: a once-hit block is worth prefix_hit_weight x 12 releases,
  // and the flood is 16: weight 2 keeps the hot prefix, 0.5 lets it age out
  // (only its shallow end, which the flood's own deepest blocks shield, stays).
  EXPECT_EQ(hot_prefix_after_cold_flood(EvictionPolicy::kPrefixAware, 2.0), 12);
  EXPECT_LT(hot_prefix_after_cold_flood(EvictionPolicy::kPrefixAware, 0.5), 12);
  EXPECT_EQ(hot_prefix_after_cold_flood(EvictionPolicy::kLru), 0);
}

TEST(KvCacheManager, RandomOperationsKeepInvariantsAndReturnEveryBlock) {
  for (EvictionPolicy eviction : {EvictionPolicy::kLru, EvictionPolicy::kSlru, EvictionPolicy::kPrefixAware,
                                  EvictionPolicy::kReuseHistory, EvictionPolicy::kAdaptiveReuse}) {
    std::mt19937 rng(7);
    KvCacheManager kv(config(64, eviction));
    std::vector<SequenceId> live;
    SequenceId next = 1;
    for (int op = 0; op < 3000; ++op) {
      const auto which = rng() % 3;
      if (which == 0 || live.empty()) {
        // A prompt drawn from 4 shared prefixes + a random tail.
        std::vector<TokenId> tokens = iota_tokens(static_cast<std::int32_t>(rng() % 3) * 8, 1 + static_cast<TokenId>(rng() % 4) * 100);
        for (int k = static_cast<int>(rng() % 20) + 1; k > 0; --k) tokens.push_back(static_cast<TokenId>(rng() % 50));
        const auto h = hashes_of(tokens);
        const auto n = static_cast<std::int32_t>(tokens.size());
        const PrefixMatch m = kv.match_prefix(h, n - 1);
        if (kv.commit({.seq_id = next, .num_tokens = n, .prefix = m, .num_queried_tokens = n}).ok()) {
          kv.cache_computed_blocks(next, h, n);
          live.push_back(next);
        }
        ++next;
      } else {
        const std::size_t i = rng() % live.size();
        kv.free(live[i]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
      if (op % 97 == 0) kv.check_invariants();
    }
    for (SequenceId id : live) kv.free(id);
    kv.check_invariants();
    EXPECT_EQ(kv.num_available_blocks(), 64);
    for (BlockId b = 0; b < 64; ++b) EXPECT_EQ(kv.pool().ref_count(b), 0);
    EXPECT_GT(kv.counters().num_hit_tokens, 0);
  }
}

// The prefix-aware policy's tail of a freed prompt, past the admission
// window, goes before the start of an older prompt.
TEST(KvCacheManager, PrefixAwareEvictsTheNovelTailBeforeAnOlderPrefix) {
  KvCacheConfig c = config(12, EvictionPolicy::kPrefixAware);
  c.prefix_admit_window_tokens = 2 * kBlock;
  c.prefix_admit_window_step_tokens = kBlock;
  KvCacheManager kv(c);
  const auto old_prompt = iota_tokens(8, 0);       // 2 blocks, freed first
  const auto new_prompt = iota_tokens(32, 1000);   // 8 blocks, freed later
  for (const auto& [id, prompt] : {std::pair{SequenceId{1}, old_prompt}, std::pair{SequenceId{2}, new_prompt}}) {
    const auto n = static_cast<std::int32_t>(prompt.size());
    ASSERT_TRUE(kv.commit({.seq_id = id, .num_tokens = n}).ok());
    kv.cache_computed_blocks(id, hashes_of(prompt), n);
    kv.free(id);
  }
  // 8 new blocks: 2 free ones and 6 evicted. The new prompt's blocks 2..7 are
  // past the window: all of them go, and the older prompt (LRU's first
  // victim) stays whole.
  ASSERT_TRUE(kv.commit({.seq_id = 3, .num_tokens = 8 * kBlock}).ok());
  kv.check_invariants();
  EXPECT_EQ(kv.match_prefix(hashes_of(old_prompt), 8).num_cached_tokens, 8);
  EXPECT_EQ(kv.match_prefix(hashes_of(new_prompt), 32).num_cached_tokens, 2 * kBlock);
}

// Random admissions, hits, partial caching and frees under every policy; after
// every operation the invariants hold and no live sequence lost a block (a
// block in use is never evicted: its key still finds it).
TEST(KvCacheManager, RandomChurnNeverEvictsABlockInUse) {
  for (EvictionPolicy eviction : {EvictionPolicy::kLru, EvictionPolicy::kSlru, EvictionPolicy::kPrefixAware,
                                  EvictionPolicy::kReuseHistory, EvictionPolicy::kAdaptiveReuse}) {
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      std::mt19937 rng(seed);
      KvCacheConfig c = config(48, eviction);
      c.prefix_admit_window_tokens = static_cast<std::int32_t>(rng() % 4) * kBlock;
      c.prefix_admit_window_step_tokens = kBlock;
      KvCacheManager kv(c);
      struct Live {
        SequenceId id;
        std::vector<std::pair<BlockHash, BlockId>> registered;  // keys this sequence's own blocks hold
      };
      std::vector<Live> live;
      SequenceId next = 1;
      for (int op = 0; op < 1500; ++op) {
        if (rng() % 2 == 0 || live.empty()) {
          // A session-like prompt: one of 3 roots, grown by a random number of 4-token turns.
          std::vector<TokenId> tokens = iota_tokens(8, 1 + static_cast<TokenId>(rng() % 3) * 1000);
          const auto turns = static_cast<int>(rng() % 6);
          for (int t = 0; t < turns; ++t) {
            for (int k = 0; k < kBlock; ++k) tokens.push_back(static_cast<TokenId>(rng() % 4));
          }
          for (int k = static_cast<int>(rng() % 5); k > 0; --k) tokens.push_back(static_cast<TokenId>(rng() % 50));
          const auto h = hashes_of(tokens);
          const auto n = static_cast<std::int32_t>(tokens.size());
          const PrefixMatch m = kv.match_prefix(h, n - 1);
          if (kv.commit({.seq_id = next, .num_tokens = n, .prefix = m, .num_queried_tokens = n}).ok()) {
            // Sometimes only part of the prompt gets computed before the next operation.
            const std::int32_t computed = rng() % 4 == 0 ? n / 2 : n;
            kv.cache_computed_blocks(next, h, computed);
            Live s{.id = next, .registered = {}};
            const std::span<const BlockId> table = kv.block_table(next);
            for (std::size_t b = 0; b < static_cast<std::size_t>(computed / kBlock) && b < h.size(); ++b) {
              // A key another block already held stays with that block.
              if (kv.pool().lookup(h[b]) == table[b]) s.registered.emplace_back(h[b], table[b]);
            }
            live.push_back(std::move(s));
          }
          ++next;
        } else {
          const std::size_t i = rng() % live.size();
          kv.free(live[i].id);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        }
        kv.check_invariants();
        for (const Live& s : live) {
          for (const auto& [hash, block] : s.registered) {
            ASSERT_EQ(kv.pool().lookup(hash), block) << "an in-use block was evicted";
            ASSERT_GT(kv.pool().ref_count(block), 0);
          }
        }
      }
      for (const Live& s : live) kv.free(s.id);
      kv.check_invariants();
      EXPECT_EQ(kv.num_available_blocks(), 48);
      EXPECT_GT(kv.counters().num_hit_tokens, 0);
    }
  }
}

}  // namespace
}  // namespace sluice
