// The host tier alone, then under the KV manager: demotion on device
// pressure, promotion by a prefix hit, swap-out on preemption, and copies in
// flight that outlive the sequence that asked for them. A model of what each block should hold
// (block contents as key values, copied on completion) is the oracle.
#include "sluice/kv/host_tier.h"

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <numeric>

#include "sluice/common/rng.h"
#include "sluice/kv/kv_cache_manager.h"

namespace sluice {
namespace {

constexpr std::int32_t kBlock = 4;

TEST(HostTier, StoreBecomesVisibleOnlyWhenItCompletes) {
  HostTier host(2, EvictionPolicy::kLru);
  const std::optional<BlockId> a = host.begin_store(11);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(host.lookup(11).has_value()) << "a store in flight is not loadable";
  EXPECT_TRUE(host.holds_or_stores(11));
  EXPECT_EQ(host.num_available_blocks(), 1);
  host.check_invariants();
  host.finish_store(*a, /*ok=*/true);
  EXPECT_EQ(host.lookup(11), a);
  EXPECT_EQ(host.key(*a), 11u);
  EXPECT_EQ(host.counters().num_stored_blocks, 1);
  host.check_invariants();
}

TEST(HostTier, FailedStoreFreesItsBlock) {
  HostTier host(1, EvictionPolicy::kLru);
  const std::optional<BlockId> a = host.begin_store(11);
  ASSERT_TRUE(a.has_value());
  host.finish_store(*a, /*ok=*/false);
  EXPECT_FALSE(host.holds_or_stores(11));
  EXPECT_EQ(host.num_available_blocks(), 1);
  EXPECT_EQ(host.counters().num_failed_stores, 1);
  host.check_invariants();
}

TEST(HostTier, EvictsLeastRecentlyUsedButNeverAPinnedBlock) {
  HostTier host(2, EvictionPolicy::kLru);
  for (BlockHash h : {1u, 2u}) host.finish_store(*host.begin_store(h), true);
  // A load of 1 pins it: the next store must evict 2, though 1 is older.
  const BlockId one = *host.lookup(1);
  host.pin_for_load(one);
  const std::optional<BlockId> three = host.begin_store(3);
  ASSERT_TRUE(three.has_value());
  EXPECT_FALSE(host.holds_or_stores(2));
  EXPECT_TRUE(host.lookup(1).has_value());
  EXPECT_FALSE(host.begin_store(4).has_value()) << "every block is pinned: no room";
  host.finish_store(*three, true);
  host.unpin(one);  // used last: 3 is now the older
  host.finish_store(*host.begin_store(5), true);
  EXPECT_FALSE(host.holds_or_stores(3));
  EXPECT_TRUE(host.lookup(1).has_value());
  EXPECT_EQ(host.counters().num_evicted_blocks, 2);
  host.check_invariants();
}

TEST(HostTier, ReuseHistoryKeepsKeysMoreRequestsUsedAndEvictsDeepBlocksFirst) {
  // One doubling of uses is worth 1 x 4 = 4 releases; one block of depth costs 1.
  HostTier host(4, EvictionPolicy::kReuseHistory, {.seen_weight_blocks = 4.0, .depth_weight_blocks = 1.0});
  // Stored in this order: 1 (used by 4 requests), then 2, 3, 4 (used once, depths 0, 0, 3).
  host.finish_store(*host.begin_store(1, {}, {.times_seen = 4, .depth_blocks = 0}), true);
  host.finish_store(*host.begin_store(2, {}, {.times_seen = 1, .depth_blocks = 0}), true);
  host.finish_store(*host.begin_store(3, {}, {.times_seen = 1, .depth_blocks = 0}), true);
  host.finish_store(*host.begin_store(4, {}, {.times_seen = 1, .depth_blocks = 3}), true);
  // Scores: 1 -> 1 + 8 = 9; 2 -> 2; 3 -> 3; 4 -> 4 - 3 = 1. LRU would evict 1 first.
  host.finish_store(*host.begin_store(5), true);
  EXPECT_FALSE(host.holds_or_stores(4)) << "the deep block goes first";
  host.finish_store(*host.begin_store(6), true);
  EXPECT_FALSE(host.holds_or_stores(2));
  host.finish_store(*host.begin_store(7), true);
  EXPECT_FALSE(host.holds_or_stores(3));
  EXPECT_TRUE(host.lookup(1).has_value()) << "the oldest block, used by 4 requests, outlives three newer ones";
  host.check_invariants();
  // At scale 0 the same tier is LRU: 1 (oldest) goes next.
  host.set_reuse_scale(0.0);
  host.finish_store(*host.begin_store(8), true);
  EXPECT_FALSE(host.holds_or_stores(1));
  host.check_invariants();
}

TEST(HostTier, ReuseHistoryCountsATouchWithTheDevicesCount) {
  HostTier host(2, EvictionPolicy::kReuseHistory, {.seen_weight_blocks = 4.0, .depth_weight_blocks = 0.0});
  host.finish_store(*host.begin_store(1, {}, {.times_seen = 1}), true);
  host.finish_store(*host.begin_store(2, {}, {.times_seen = 1}), true);
  // 1 is demoted again, now used by 8 requests (the device's count): it is
  // also the most recent, so 2 goes first; then 1 outlives two newer stores.
  host.touch(*host.lookup(1), /*on_device=*/false, /*times_seen=*/8);
  host.finish_store(*host.begin_store(3, {}, {.times_seen = 1}), true);
  EXPECT_FALSE(host.holds_or_stores(2));
  host.finish_store(*host.begin_store(4, {}, {.times_seen = 1}), true);
  EXPECT_FALSE(host.holds_or_stores(3));
  EXPECT_TRUE(host.lookup(1).has_value());
  host.check_invariants();
}

std::vector<BlockHash> hashes_of(const std::vector<TokenId>& tokens) {
  std::vector<BlockHash> h;
  extend_block_hashes(h, tokens, kBlock, 0);
  return h;
}

std::vector<TokenId> iota_tokens(std::int32_t n, TokenId first) {
  std::vector<TokenId> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

KvCacheConfig tiered(std::int32_t num_blocks, std::int32_t num_host_blocks, std::int32_t watermark,
                     EvictionPolicy host_eviction = EvictionPolicy::kLru) {
  return {.num_blocks = num_blocks,
          .block_size_tokens = kBlock,
          .eviction = EvictionPolicy::kLru,
          .num_host_blocks = num_host_blocks,
          .host_eviction = host_eviction,
          .demote_watermark_blocks = watermark};
}

// Runs a prompt through: commit, compute (cache), free.
void run_prompt(KvCacheManager& kv, SequenceId id, const std::vector<TokenId>& prompt) {
  const auto h = hashes_of(prompt);
  const auto n = static_cast<std::int32_t>(prompt.size());
  ASSERT_TRUE(kv.commit({.seq_id = id, .num_tokens = n, .num_queried_tokens = n}).ok());
  kv.cache_computed_blocks(id, h, n);
  kv.free(id);
}

void complete_all(KvCacheManager& kv) {
  for (const KvBlockCopy& c : kv.take_new_copies()) kv.complete_copy({.id = c.id});
}

TEST(KvHostTier, DemotedPrefixIsPromotedByALaterHit) {
  KvCacheManager kv(tiered(4, 8, /*watermark=*/2));
  const auto a = iota_tokens(8, 100);  // 2 full blocks
  const auto ha = hashes_of(a);
  run_prompt(kv, 1, a);
  // 2 blocks cached free, 2 free: watermark met, nothing to do.
  kv.start_demotions();
  EXPECT_TRUE(kv.take_new_copies().empty());
  run_prompt(kv, 2, iota_tokens(8, 500));  // takes the 2 free blocks: the pool is all cached
  kv.start_demotions();
  std::vector<KvBlockCopy> stores = kv.take_new_copies();
  ASSERT_EQ(stores.size(), 2u) << "the two least recent blocks (a's) go down";
  for (const KvBlockCopy& c : stores) EXPECT_EQ(c.direction, KvCopyDirection::kDeviceToHost);
  kv.check_invariants();
  // Until the stores complete, a's keys are still on the device.
  EXPECT_EQ(kv.match_prefix(ha, 8).num_cached_tokens, 8);
  EXPECT_EQ(kv.num_available_blocks(), 2) << "blocks being demoted are not available";
  for (const KvBlockCopy& c : stores) kv.complete_copy({.id = c.id});
  kv.check_invariants();
  EXPECT_EQ(kv.counters().num_host_stored_blocks, 2);
  EXPECT_EQ(kv.num_available_blocks(), 4);

  const PrefixMatch m = kv.match_prefix(ha, 8);
  EXPECT_EQ(m.num_cached_tokens, 0);
  ASSERT_EQ(m.host_blocks.size(), 2u);
  const PrefixProbe probe = kv.probe_prefix(ha, 8);
  EXPECT_EQ(probe.num_hit_blocks, 0);
  EXPECT_EQ(probe.num_host_hit_blocks, 2);

  ASSERT_TRUE(kv.commit({.seq_id = 3, .num_tokens = 8, .prefix = m, .num_queried_tokens = 9}).ok());
  EXPECT_TRUE(kv.is_loading(3));
  std::vector<KvBlockCopy> loads = kv.take_new_copies();
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[0].direction, KvCopyDirection::kHostToDevice);
  EXPECT_EQ(loads[0].device_block, kv.block_table(3)[0]);
  EXPECT_EQ(loads[0].host_block, m.host_blocks[0]);
  EXPECT_EQ(kv.match_prefix(ha, 8).num_cached_tokens, 0) << "a load in flight is not a device hit yet";
  kv.check_invariants();
  for (const KvBlockCopy& c : loads) kv.complete_copy({.id = c.id});
  EXPECT_FALSE(kv.is_loading(3));
  EXPECT_EQ(kv.match_prefix(ha, 8).num_cached_tokens, 8) << "the promoted blocks join the device cache";
  EXPECT_EQ(kv.counters().num_host_hit_tokens, 8);
  EXPECT_EQ(kv.counters().num_host_loaded_blocks, 2);
  EXPECT_EQ(kv.counters().num_queries_with_host_hits, 1);
  kv.free(3);
  kv.check_invariants();
}

// A loading admission takes its blocks at once. It must leave half the
// watermark free behind it, or the allocations after it (the rest of the
// step, and the next step's, which come before that step's demotions land)
// evict cached keys past the host: 60% of the keys the Mooncake trace lost
// that way (docs/benchmarks.md, session 9).
TEST(KvHostTier, RoomForALoadLeavesHalfTheWatermarkFree) {
  KvCacheManager kv(tiered(8, 16, /*watermark=*/4));
  run_prompt(kv, 1, iota_tokens(8, 100));   // 2 blocks
  run_prompt(kv, 2, iota_tokens(24, 500));  // 6 blocks: every device block is cached
  kv.start_demotions();
  complete_all(kv);
  ASSERT_EQ(kv.pool().num_uncached_free_blocks(), 4);
  // 3 blocks fit the 4 free ones, but would leave 1 of the 2 the step after needs.
  EXPECT_FALSE(kv.make_room_below(3)) << "the load waits for its demotions";
  const std::vector<KvBlockCopy> stores = kv.take_new_copies();
  EXPECT_EQ(stores.size(), 3u) << "demotions up to the load + the whole watermark";
  for (const KvBlockCopy& c : stores) kv.complete_copy({.id = c.id});
  EXPECT_TRUE(kv.make_room_below(3));
  // The load's blocks, then two more blocks the next step allocates before any demotion.
  ASSERT_TRUE(kv.commit({.seq_id = 3, .num_tokens = 12}).ok());
  ASSERT_TRUE(kv.commit({.seq_id = 4, .num_tokens = 8}).ok());
  EXPECT_EQ(kv.counters().num_demotions_skipped, 0) << "a cached key left the device without reaching the host";
  EXPECT_EQ(kv.counters().num_host_stored_blocks, 7);
  kv.check_invariants();
}

// Prompts 100.. then 500.. on a 4-block device with a watermark of 2: the
// first prompt's two blocks go to the host, their stores complete.
void demote_first_prompt(KvCacheManager& kv) {
  run_prompt(kv, 1, iota_tokens(8, 100));
  run_prompt(kv, 2, iota_tokens(8, 500));
  kv.start_demotions();
  complete_all(kv);
}

TEST(KvHostTier, LoadOutlivesAnAbortedSequence) {
  KvCacheManager kv(tiered(4, 8, 2));
  const auto ha = hashes_of(iota_tokens(8, 100));
  demote_first_prompt(kv);
  const PrefixMatch m = kv.match_prefix(ha, 8);
  ASSERT_EQ(m.host_blocks.size(), 2u);
  ASSERT_TRUE(kv.commit({.seq_id = 3, .num_tokens = 8, .prefix = m, .num_queried_tokens = 9}).ok());
  const std::vector<KvBlockCopy> loads = kv.take_new_copies();
  kv.free(3);  // aborted mid-copy
  kv.check_invariants();
  for (const KvBlockCopy& c : loads) {
    EXPECT_EQ(kv.pool().ref_count(c.device_block), 1) << "the copy still holds its destination";
    EXPECT_EQ(kv.counters().num_host_loaded_blocks, 2);
  }
  // Another sequence cannot get those blocks while they are written.
  EXPECT_FALSE(kv.commit({.seq_id = 4, .num_tokens = 16}).ok());
  for (const KvBlockCopy& c : loads) kv.complete_copy({.id = c.id});
  kv.check_invariants();
  EXPECT_EQ(kv.num_available_blocks(), 4) << "nothing leaked";
  EXPECT_EQ(kv.match_prefix(ha, 8).num_cached_tokens, 8) << "the loaded data is still a valid cache entry";
}

TEST(KvHostTier, FailedLoadMarksItsSequenceAndCachesNothing) {
  KvCacheManager kv(tiered(4, 8, 2));
  const auto ha = hashes_of(iota_tokens(8, 100));
  demote_first_prompt(kv);
  ASSERT_TRUE(kv.commit({.seq_id = 3, .num_tokens = 8, .prefix = kv.match_prefix(ha, 8), .num_queried_tokens = 9}).ok());
  for (const KvBlockCopy& c : kv.take_new_copies()) kv.complete_copy({.id = c.id, .ok = false});
  EXPECT_TRUE(kv.load_failed(3));
  EXPECT_EQ(kv.counters().num_failed_copies, 2);
  kv.free(3);
  EXPECT_EQ(kv.match_prefix(ha, 8).num_cached_tokens, 0);
  EXPECT_EQ(kv.match_prefix(ha, 8).host_blocks.size(), 2u) << "the host copy is intact";
  kv.check_invariants();
}

TEST(KvHostTier, AdmissionByHitsKeepsNeverHitBlocksOffTheHost) {
  KvCacheConfig c = tiered(4, 8, 2);
  c.host_admission.min_hits = 1;
  KvCacheManager kv(c);
  run_prompt(kv, 1, iota_tokens(8, 100));
  run_prompt(kv, 2, iota_tokens(8, 500));
  kv.start_demotions();
  EXPECT_TRUE(kv.take_new_copies().empty());
  EXPECT_EQ(kv.counters().num_demotions_skipped, 2);
  EXPECT_EQ(kv.num_available_blocks(), 4);
  kv.check_invariants();
}

TEST(KvHostTier, SwapOutStoresOnlyItsOwnBlocksAndHoldsThemUntilStored) {
  KvCacheManager kv(tiered(8, 8, /*watermark=*/0));
  const auto shared = iota_tokens(4, 100);  // one block another sequence also holds
  std::vector<TokenId> a = shared;
  for (TokenId t : iota_tokens(10, 200)) a.push_back(t);  // 3 full blocks + 2 tokens
  const auto ha = hashes_of(a);
  ASSERT_TRUE(kv.commit({.seq_id = 1, .num_tokens = 4, .num_queried_tokens = 4}).ok());
  kv.cache_computed_blocks(1, hashes_of(shared), 4);
  ASSERT_TRUE(kv.commit({.seq_id = 2, .num_tokens = 14, .prefix = kv.match_prefix(ha, 13), .num_queried_tokens = 14}).ok());
  kv.cache_computed_blocks(2, ha, 14);
  EXPECT_EQ(kv.num_available_blocks(), 4);

  EXPECT_EQ(kv.swap_out(2, ha), 2) << "the shared block stays on the device; the partial one has no key";
  EXPECT_FALSE(kv.has_sequence(2));
  const std::vector<KvBlockCopy> stores = kv.take_new_copies();
  ASSERT_EQ(stores.size(), 2u);
  EXPECT_EQ(kv.num_freeing_blocks(), 2);
  EXPECT_EQ(kv.num_available_blocks(), 5) << "only the partial block is free at once";
  EXPECT_EQ(kv.match_prefix(ha, 13).num_cached_tokens, 12) << "keys stay hittable while they are stored";
  // Nobody can take the blocks under the stores.
  EXPECT_FALSE(kv.commit({.seq_id = 3, .num_tokens = 24}).ok());
  kv.check_invariants();
  for (const KvBlockCopy& c : stores) {
    EXPECT_EQ(c.direction, KvCopyDirection::kDeviceToHost);
    kv.complete_copy({.id = c.id});
  }
  kv.check_invariants();
  EXPECT_EQ(kv.num_freeing_blocks(), 0);
  EXPECT_EQ(kv.num_available_blocks(), 7);
  EXPECT_EQ(kv.counters().num_host_swapped_out_blocks, 2);
  EXPECT_EQ(kv.counters().num_host_stored_blocks, 2);
  EXPECT_EQ(kv.match_prefix(ha, 13).num_cached_tokens, 12) << "landed, the blocks are cached on the device";
  // Evicted from the device, the swapped part comes back from the host.
  ASSERT_TRUE(kv.commit({.seq_id = 4, .num_tokens = 28}).ok());
  kv.check_invariants();
  const PrefixMatch m = kv.match_prefix(ha, 13);
  EXPECT_EQ(m.num_cached_tokens, 4);
  EXPECT_EQ(m.host_blocks.size(), 2u);
}

TEST(KvHostTier, AbortMidSwapLeaksNothing) {
  KvCacheManager kv(tiered(4, 8, 0));
  const auto a = iota_tokens(8, 100);
  const auto ha = hashes_of(a);
  ASSERT_TRUE(kv.commit({.seq_id = 1, .num_tokens = 8, .num_queried_tokens = 8}).ok());
  kv.cache_computed_blocks(1, ha, 8);
  ASSERT_EQ(kv.swap_out(1, ha), 2);
  kv.free(1);  // the abort arrives mid-swap: the sequence is already gone
  const std::vector<KvBlockCopy> stores = kv.take_new_copies();
  kv.check_invariants();
  // The stores fail: the device blocks still come back, the host keeps nothing.
  for (const KvBlockCopy& c : stores) kv.complete_copy({.id = c.id, .ok = false});
  kv.check_invariants();
  EXPECT_EQ(kv.num_available_blocks(), 4);
  EXPECT_EQ(kv.num_host_stored_blocks(), 0);
  EXPECT_EQ(kv.match_prefix(ha, 8).num_cached_tokens, 8) << "the device copy was never touched";
}

// Random commits, frees, swap-outs, demotions and copy completions in any order; every
// block's contents are tracked as the key it holds, and a finished load must
// hold exactly the key of its prefix position.
TEST(KvHostTier, RandomChurnKeepsInvariantsAndContents) {
  std::int64_t num_loads = 0, num_stores = 0, num_swaps = 0;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    SplitMix64 rng(seed);
    auto pick = [&](std::uint64_t n) { return static_cast<std::int32_t>(rng.next() % n); };
    // Every host order: the reuse policies rank by counts the device passes down.
    const EvictionPolicy host_eviction = std::array{EvictionPolicy::kLru, EvictionPolicy::kSlru, EvictionPolicy::kReuseHistory,
                                                    EvictionPolicy::kAdaptiveReuse}[seed % 4];
    KvCacheManager kv(tiered(8 + pick(16), 1 + pick(24), pick(6), host_eviction));
    std::map<BlockId, BlockHash> device;  // what each device block holds (the oracle)
    std::map<BlockId, BlockHash> host;
    std::vector<KvBlockCopy> in_flight;
    std::map<SequenceId, std::vector<BlockHash>> live;
    std::vector<std::vector<TokenId>> prefixes;
    for (int p = 0; p < 4; ++p) prefixes.push_back(iota_tokens(4 * (1 + pick(5)), 1000 * p));
    SequenceId next_id = 1;
    for (int op = 0; op < 400; ++op) {
      const int what = pick(6);
      if (what == 0 || live.empty()) {
        std::vector<TokenId> prompt = prefixes[static_cast<std::size_t>(pick(4))];
        for (int k = 0, n = 1 + pick(8); k < n; ++k) prompt.push_back(static_cast<TokenId>(next_id * 100 + k));
        const auto h = hashes_of(prompt);
        const auto n = static_cast<std::int32_t>(prompt.size());
        PrefixMatch m = kv.match_prefix(h, n - 1);
        if (pick(3) == 0) m.host_blocks.clear();  // the planner chose recompute
        const SequenceId id = next_id++;
        if (!kv.commit({.seq_id = id, .num_tokens = n, .prefix = m, .num_queried_tokens = n}).ok()) continue;
        const auto table = kv.block_table(id);
        for (std::size_t i = 0; i < m.blocks.size(); ++i) EXPECT_EQ(device.at(table[i]), h[i]) << "seed " << seed;
        for (const KvBlockCopy& c : kv.take_new_copies()) in_flight.push_back(c);
        live[id] = h;
        // Computed blocks hold their keys (the loaded ones arrive by copy).
        for (std::size_t i = m.blocks.size() + m.host_blocks.size(); i < table.size(); ++i)
          device[table[i]] = i < h.size() ? h[i] : 0;
        if (!kv.is_loading(id)) kv.cache_computed_blocks(id, h, n);
      } else if (what == 1 || what == 5) {
        auto it = std::next(live.begin(), pick(live.size()));
        if (!kv.is_loading(it->first)) kv.cache_computed_blocks(it->first, it->second, 0);
        if (what == 5 && !kv.is_loading(it->first)) {  // a preemption that swaps (loading ones never run)
          num_swaps += kv.swap_out(it->first, it->second);
          for (const KvBlockCopy& c : kv.take_new_copies()) in_flight.push_back(c);
        } else {
          kv.free(it->first);
        }
        live.erase(it);
      } else if (what == 2) {
        kv.start_demotions();
        for (const KvBlockCopy& c : kv.take_new_copies()) in_flight.push_back(c);
      } else if (!in_flight.empty()) {
        const auto k = static_cast<std::size_t>(pick(in_flight.size()));
        const KvBlockCopy c = in_flight[k];
        in_flight.erase(in_flight.begin() + static_cast<std::ptrdiff_t>(k));
        if (c.direction == KvCopyDirection::kDeviceToHost) {
          host[c.host_block] = device.at(c.device_block);
        } else {
          device[c.device_block] = host.at(c.host_block);
        }
        kv.complete_copy({.id = c.id});
      }
      kv.check_invariants();
      // Every device key the cache serves is held by its block.
      for (const auto& [id, h] : live) {
        const PrefixMatch m = kv.match_prefix(h, static_cast<std::int32_t>(h.size()) * kBlock);
        for (std::size_t i = 0; i < m.blocks.size(); ++i) EXPECT_EQ(device.at(m.blocks[i]), h[i]) << "seed " << seed;
        for (std::size_t j = 0; j < m.host_blocks.size(); ++j)
          EXPECT_EQ(host.at(m.host_blocks[j]), h[m.blocks.size() + j]) << "seed " << seed;
      }
    }
    for (const KvBlockCopy& c : in_flight) kv.complete_copy({.id = c.id});
    for (const auto& [id, h] : live) kv.free(id);
    kv.check_invariants();
    EXPECT_EQ(kv.num_available_blocks(), kv.num_blocks()) << "seed " << seed << ": leaked";
    EXPECT_EQ(kv.num_copies_in_flight(), 0);
    num_loads += kv.counters().num_host_loaded_blocks;
    num_stores += kv.counters().num_host_stored_blocks;
  }
  // The churn is meant to exercise both directions; if it stops, the test is weaker.
  EXPECT_GT(num_loads, 0);
  EXPECT_GT(num_stores, 0);
  EXPECT_GT(num_swaps, 0);
}

}  // namespace
}  // namespace sluice
