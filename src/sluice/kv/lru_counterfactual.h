// LruCounterfactual: how much the adaptive-reuse policy should trust its
// reuse counts, learnt online by comparing its prefix hits with those of an
// LRU cache of the same size run beside it on the same requests (a shadow of
// keys only, no contents: the way ARC learns its split from ghosts, but
// against the whole alternative). Each new request adds (its device hit -
// the shadow's hit, in blocks) x rate to a scale within [0, 1]; the policy
// multiplies its count and depth terms by that scale, so it drifts to LRU
// (scale 0) on traffic where the counts lose to recency, and stays with the
// counts where they win.
#pragma once

#include <cmath>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>

#include "sluice/kv/block_hash.h"

namespace sluice {

class LruCounterfactual {
 public:
  // capacity_blocks: the shadow LRU's size (the device pool's).
  LruCounterfactual(double initial_scale, double rate, std::int32_t capacity_blocks);

  double scale() const { return scale_; }
  // A new request's full-block keys (its prompt's) and the blocks of them
  // the real cache had: the shadow's hit is compared with it, then the
  // shadow uses every key.
  void on_request(std::span<const BlockHash> keys, std::int32_t num_hit_blocks);
  // Keys a running request added later (generated tokens' full blocks).
  void on_more_keys(std::span<const BlockHash> keys);
  // Sums over requests so far, in blocks (for tests and the benchmark).
  std::int64_t num_hit_blocks() const { return num_hit_blocks_; }
  std::int64_t num_lru_hit_blocks() const { return num_lru_hit_blocks_; }

  void check_invariants() const;

 private:
  void use(BlockHash key);

  double scale_;
  double rate_;
  std::size_t capacity_;
  std::int64_t num_hit_blocks_ = 0;
  std::int64_t num_lru_hit_blocks_ = 0;
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
