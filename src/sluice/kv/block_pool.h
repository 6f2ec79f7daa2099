// BlockPool: the fixed set of KV blocks, their reference counts, and the
// prefix cache's hash -> block index. A block is in exactly one state:
//   in use       ref_count > 0 (cached or not);
//   cached free  ref_count == 0, has a hash, waits in the Evictor, reusable by a hit;
//   free         ref_count == 0, no hash, on the free list.
// A block being demoted to a lower tier is in use: the demotion holds one
// reference until its copy completes (begin_demotion / finish_demotion), and
// its key stays hittable meanwhile (the copy only reads it).
// Allocation takes free blocks first and evicts cached free ones only when it
// must, so cached prefixes live as long as memory allows.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/kv/admission_window.h"
#include "sluice/kv/block_hash.h"
#include "sluice/kv/evictor.h"
#include "sluice/kv/lru_counterfactual.h"
#include "sluice/kv/reuse_history.h"

namespace sluice {

struct BlockPoolCounters {
  std::int64_t num_evicted_blocks = 0;  // keys that left the pool (directly or after a demotion)
  std::int64_t num_hit_blocks = 0;  // blocks taken from the cache by touch()
};

class BlockPool {
 public:
  // history_counters_per_row: the reuse-history policy's sketch width (reuse_history.h).
  // shadow_capacity_blocks: the LRU adaptive reuse compares itself with
  // (lru_counterfactual.h): this pool's size (0), or, with a host tier below
  // it, both tiers' (the hierarchy is what the policy should beat).
  // keep_reuse_history: count key uses (times_seen) whatever the policy: a
  // host tier below that ranks by them reads the counts at demotion.
  BlockPool(std::int32_t num_blocks, EvictionPolicy eviction, std::int32_t protected_capacity_blocks,
            PrefixAwareParams prefix_aware = {}, ReuseHistoryParams reuse_history = {},
            std::int64_t history_counters_per_row = 0, std::int32_t shadow_capacity_blocks = 0,
            bool keep_reuse_history = false);

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(ref_count_.size()); }
  // Blocks an allocation can get: free + cached free.
  std::int32_t num_available_blocks() const {
    return static_cast<std::int32_t>(free_list_.size()) + evictor_.size();
  }
  std::int32_t num_cached_free_blocks() const { return evictor_.size(); }
  // Of those, in the SLRU protected segment (0 under LRU).
  std::int32_t num_protected_free_blocks() const { return evictor_.num_protected(); }
  std::int32_t num_used_blocks() const { return num_blocks() - num_available_blocks(); }
  // Free blocks that hold no key: what allocation takes before it evicts.
  std::int32_t num_uncached_free_blocks() const { return static_cast<std::int32_t>(free_list_.size()); }
  std::int32_t ref_count(BlockId block) const { return ref_count_[index(block)]; }
  // The cached block holding this prefix key, in use or not.
  std::optional<BlockId> lookup(BlockHash hash) const;
  const BlockPoolCounters& counters() const { return counters_; }

  // Takes n blocks (ref_count 1 each), evicting cached free blocks if needed.
  // The caller checked num_available_blocks() >= n.
  std::vector<BlockId> allocate(std::int32_t n);
  // A prefix hit: one more reference to a cached block (out of the Evictor if it was free).
  void touch(BlockId block);
  // One more reference to a block in use (a copy's, beside its owner's).
  void add_reference(BlockId block);
  // Drops one reference; at zero the block becomes cached free (if it has a
  // hash) or free. novel_depth_blocks, depth_blocks: see EvictionSignals; a
  // release without a depth (a copy's) keeps the one its sequence gave.
  void release(BlockId block, std::int32_t novel_depth_blocks = 0,
               std::optional<std::int32_t> depth_blocks = std::nullopt);
  // Registers a full, computed block under its prefix key. If another block
  // already holds that key the pool keeps the existing one and this block stays
  // unregistered (it is freed, not cached, at release). Returns whether it was
  // registered. num_hits: hits it starts with (a block promoted from a lower
  // tier was hit there). Either way the key counts one more use in the reuse
  // history, as a hit does in touch().
  bool register_hash(BlockId block, BlockHash hash, std::int32_t num_hits = 0);
  // Requests that used the key so far (reuse-history policy; 0 otherwise).
  std::int32_t times_seen(BlockHash hash) const { return history_ ? history_->count(hash) : 0; }
  // The counts behind times_seen (nullptr when the pool keeps none).
  const ReuseHistory* reuse_history() const { return history_ ? &*history_ : nullptr; }

  // Demotion: the next eviction victim leaves the evictor, referenced by the
  // demotion, its key still cached (hittable) until finish_demotion(). nullopt
  // when nothing is cached free.
  struct Demotion {
    BlockId block = 0;
    BlockHash hash = 0;
    EvictionSignals signals;  // what it was released with
  };
  std::optional<Demotion> begin_demotion();
  // The demotion's copy is done (or was not needed): its reference goes; if
  // it was the last, the key leaves the pool (an eviction) and the block is free.
  // A hit meanwhile keeps block and key, as any hit does.
  void finish_demotion(BlockId block);
  // The first block a new request did not find cached (prefix-aware policy:
  // teaches the admission window; no-op otherwise).
  void note_first_miss(BlockHash hash);
  // The prefix-aware policy's current admission window (0 under LRU/SLRU).
  std::int32_t admit_window_blocks() const { return admission_ ? admission_->blocks() : 0; }
  // Adaptive reuse (lru_counterfactual.h): a new request's prompt keys and
  // how many of them it hit (on this pool, or on the hierarchy the shadow
  // models); later, keys it added. No-ops otherwise.
  void note_request(std::span<const BlockHash> keys, std::int32_t num_hit_blocks);
  void note_more_keys(std::span<const BlockHash> keys, std::size_t first_depth_blocks);
  // Adaptive reuse's learnt scale (lru_counterfactual.h); 1 for reuse history.
  double reuse_scale() const { return evictor_.reuse_scale(); }
  const LruCounterfactual* counterfactual() const { return counterfactual_ ? &*counterfactual_ : nullptr; }

  void check_invariants() const;

 private:
  std::size_t index(BlockId block) const;
  void evict_one();

  std::vector<std::int32_t> ref_count_;         // [num_blocks]
  std::vector<std::optional<BlockHash>> hash_;  // [num_blocks]
  std::vector<std::int32_t> num_hits_;          // [num_blocks] since it was registered
  std::vector<std::int32_t> novel_depth_;       // [num_blocks] at its last release
  std::vector<std::int32_t> depth_;             // [num_blocks] at its last release
  std::vector<BlockId> free_list_;              // uncached, unreferenced
  std::unordered_map<BlockHash, BlockId> cached_;
  Evictor evictor_;
  std::optional<AdmissionWindow> admission_;  // prefix-aware only
  std::optional<ReuseHistory> history_;       // reuse history and adaptive reuse
  std::optional<LruCounterfactual> counterfactual_;  // adaptive reuse only
  // Adaptive reuse: the evictor's scale follows the learnt one in coarse steps.
  void follow_scale();
  BlockPoolCounters counters_;
};

}  // namespace sluice
