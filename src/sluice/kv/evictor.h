// Evictor: the order in which free-but-cached blocks are given up. Only blocks
// nobody references are here; a prefix hit takes a block back out (remove()).
// LRU/SLRU: two intrusive doubly-linked lists over arrays indexed by BlockId
// make every operation O(1), which the scheduler's 50 us step budget needs.
// Prefix-aware and reuse history: an ordered set of (tier, score) keys, O(log n)
// per operation.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/kv/eviction_policy.h"

namespace sluice {

// Knobs of the prefix-aware policy, in blocks (the KV manager converts tokens).
struct PrefixAwareParams {
  // A never-hit block at novel depth >= this joins the cold tier. The
  // starting value: BlockPool adapts it (admission_window.h) by this step.
  std::int32_t admit_window_blocks = 1;
  std::int32_t admit_window_step_blocks = 1;
  // How many releases one doubling of a block's hits is worth: the block
  // outlives that many later-freed blocks of equal depth.
  double hit_weight_blocks = 0.0;
};

// Knobs of the reuse-history policy, in releases (the recency clock).
struct ReuseHistoryParams {
  // What one doubling of the requests that used a block's key is worth: the
  // block outlives that many later-freed blocks of equal depth.
  double seen_weight_blocks = 0.0;
  // What one block of depth costs: a deep block is freed that many releases
  // earlier than its parent, since a hit on it needs every block before it.
  double depth_weight_blocks = 0.0;
};

class Evictor {
 public:
  // protected_capacity_blocks: how many blocks the SLRU protected segment may
  // hold; its oldest block is demoted to probation beyond that. Unused by LRU.
  Evictor(EvictionPolicy policy, std::int32_t num_blocks, std::int32_t protected_capacity_blocks,
          PrefixAwareParams prefix_aware = {}, ReuseHistoryParams reuse_history = {});

  // A block became free. was_hit: it served a prefix hit while cached, which
  // under SLRU earns it the protected segment.
  void insert(BlockId block, bool was_hit) { insert(block, EvictionSignals{.num_hits = was_hit ? 1 : 0}); }
  // The same with everything the ranked policies rank by (LRU/SLRU read only
  // whether num_hits > 0).
  void insert(BlockId block, const EvictionSignals& signals);
  void remove(BlockId block);
  // The next block to evict, taken out; nullopt when empty.
  std::optional<BlockId> pop_victim();
  // Whether the last pop_victim() took a block from the prefix-aware cold tier.
  bool last_victim_was_cold() const { return last_victim_was_cold_; }
  // Applies to blocks inserted from now on.
  void set_admit_window_blocks(std::int32_t blocks);
  std::int32_t admit_window_blocks() const { return prefix_aware_.admit_window_blocks; }

  // Reuse-history policies: the weight of the count and depth terms (adaptive
  // reuse learns it; 1 otherwise). A change re-ranks every block held, O(n log n),
  // so that a weight found too high stops keeping the blocks it favoured:
  // the caller changes it in coarse steps.
  void set_reuse_scale(double scale);
  double reuse_scale() const { return reuse_scale_; }

  bool contains(BlockId block) const { return segment_[static_cast<std::size_t>(block)] != Segment::kNone; }
  std::int32_t size() const { return probation_.size + protected_.size + static_cast<std::int32_t>(ranked_.size()); }
  std::int32_t num_protected() const { return protected_.size; }

  void check_invariants() const;

 private:
  enum class Segment : std::uint8_t { kNone, kProbation, kProtected, kRanked };
  struct List {  // head = oldest (next victim), tail = newest
    BlockId head = -1;
    BlockId tail = -1;
    std::int32_t size = 0;
  };
  List& list_of(Segment segment) { return segment == Segment::kProtected ? protected_ : probation_; }
  void push_back(Segment segment, BlockId block);
  void unlink(BlockId block);
  // Prefix-aware order: the cold tier (false < true) first, then the lowest score.
  using RankKey = std::pair<std::pair<bool, double>, BlockId>;
  RankKey rank_key(BlockId block) const {
    const auto i = static_cast<std::size_t>(block);
    return {{warm_[i], score_[i]}, block};
  }

  EvictionPolicy policy_;
  std::int32_t protected_capacity_blocks_;
  std::vector<BlockId> prev_;  // [num_blocks]
  std::vector<BlockId> next_;  // [num_blocks]
  std::vector<Segment> segment_;  // [num_blocks]
  List probation_;
  List protected_;
  // Ranked policies' state; ranked_ holds their blocks, segment_ marks them kRanked.
  bool ranked() const {
    return policy_ == EvictionPolicy::kPrefixAware || policy_ == EvictionPolicy::kReuseHistory ||
           policy_ == EvictionPolicy::kAdaptiveReuse;
  }

  PrefixAwareParams prefix_aware_;
  ReuseHistoryParams reuse_history_;
  std::int64_t num_releases_ = 0;  // the recency clock
  bool last_victim_was_cold_ = false;
  double reuse_scale_ = 1.0;
  std::vector<std::int64_t> released_at_;  // [num_blocks] reuse policies: the clock at its insert
  std::vector<double> bonus_;      // [num_blocks] reuse policies: the count and depth terms, unscaled
  std::vector<double> score_;      // [num_blocks] valid while ranked
  std::vector<bool> warm_;         // [num_blocks] valid while ranked
  std::set<RankKey> ranked_;
};

}  // namespace sluice
