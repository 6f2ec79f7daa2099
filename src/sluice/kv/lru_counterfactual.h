// LruCounterfactual: how much the adaptive-reuse policy should trust its
// reuse counts, learnt online from shadows of keys only (no contents) run
// beside the cache on the same requests: an LRU of the same size, and, since
// session 13, a cache in the reuse-history order itself (counts and depth at
// full weight). Each new request adds (the reuse shadow's hit - the LRU
// shadow's hit, in blocks) x rate to a scale within [0, 1]; the policy
// multiplies its count and depth terms by that scale, so it drifts to LRU
// (scale 0) on traffic where the counts lose to recency, and to the counts
// where they win. Comparing two shadows, not the real cache with LRU, is what
// lets it come back: at scale 0 the real cache *is* LRU, so its hits equal
// the LRU shadow's and the old rule (ours - LRU's) never moved again, however
// much the traffic came to favour the counts (docs/kv-tiers.md, "Session 13").
// With a host tier below, both tiers' counterfactuals keep the old rule: their
// shadows model the hierarchy, which one reuse-order cache of its size does
// not, and the hierarchy at scale 0 is not one LRU (block_pool.cpp,
// kv_cache_manager.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>

#include "sluice/kv/block_hash.h"
#include "sluice/kv/evictor.h"
#include "sluice/kv/reuse_history.h"

namespace sluice {

// A keys-only cache in the reuse-history order (evictor.h): a key used by a
// request at depth d is ranked clock + seen_weight x log2(requests that used
// it) - depth_weight x d, the clock counting key uses as the evictor's counts
// releases; the lowest goes beyond capacity. Counts come from the caller's
// sketch (the pool's), read when the request is noted.
class ReuseShadow {
 public:
  ReuseShadow(std::int32_t capacity_blocks, ReuseHistoryParams params);

  // Blocks of keys[0, max_hit) held, from the start.
  std::size_t prefix_hit(std::span<const BlockHash> keys, std::size_t max_hit) const;
  // keys[j] was used at depth first_depth_blocks + j; history: its counts (none: 1 each).
  void use(std::span<const BlockHash> keys, std::size_t first_depth_blocks, const ReuseHistory* history);
  std::size_t size() const { return score_.size(); }

  void check_invariants() const;

 private:
  std::size_t capacity_;
  ReuseHistoryParams params_;
  std::int64_t clock_ = 0;
  std::unordered_map<BlockHash, double> score_;
  std::set<std::pair<double, BlockHash>> order_;  // lowest score: next to go
};

class LruCounterfactual {
 public:
  // capacity_blocks: both shadows' size (the device pool's). reuse: the
  // reuse shadow's weights, in key uses; without it the scale learns from
  // the real cache's hit against the LRU shadow's (the rule before session 13).
  LruCounterfactual(double initial_scale, double rate, std::int32_t capacity_blocks,
                    std::optional<ReuseHistoryParams> reuse = std::nullopt);

  double scale() const { return scale_; }
  // A new request's full-block keys (its prompt's) and the blocks of them
  // the real cache had: the shadows' hits are compared, then the shadows
  // use every key. history: the counts the reuse shadow ranks by.
  void on_request(std::span<const BlockHash> keys, std::int32_t num_hit_blocks,
                  const ReuseHistory* history = nullptr);
  // Keys a running request added later (generated tokens' full blocks), the
  // first at depth first_depth_blocks.
  void on_more_keys(std::span<const BlockHash> keys, std::size_t first_depth_blocks = 0,
                    const ReuseHistory* history = nullptr);
  // Sums over requests so far, in blocks (for tests and the benchmark).
  std::int64_t num_hit_blocks() const { return num_hit_blocks_; }
  std::int64_t num_lru_hit_blocks() const { return num_lru_hit_blocks_; }
  std::int64_t num_reuse_shadow_hit_blocks() const { return num_reuse_shadow_hit_blocks_; }
  // Whether the scale learns from the reuse shadow (else from the real hit).
  bool duels() const { return reuse_shadow_.has_value(); }

  void check_invariants() const;

 private:
  void use(BlockHash key);

  double scale_;
  double rate_;
  std::size_t capacity_;
  std::int64_t num_hit_blocks_ = 0;
  std::int64_t num_lru_hit_blocks_ = 0;
  std::int64_t num_reuse_shadow_hit_blocks_ = 0;
  std::optional<ReuseShadow> reuse_shadow_;
  std::list<BlockHash> recency_;  // most recently used first
  std::unordered_map<BlockHash, std::list<BlockHash>::iterator> where_;
};

// An evictor follows the learnt scale in eighths, and only once it is a whole
// eighth away: each change re-ranks every block the evictor orders.
inline constexpr double kReuseScaleStep = 1.0 / 8.0;
// The scale an evictor at `current` should move to, or nullopt to stay.
inline std::optional<double> reuse_scale_to_follow(double current, double learnt) {
  if (std::abs(learnt - current) < kReuseScaleStep) return std::nullopt;
  return std::round(learnt / kReuseScaleStep) * kReuseScaleStep;
}

}  // namespace sluice
