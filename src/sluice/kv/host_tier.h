// HostTier: the KV blocks kept in host memory below the device pool, with
// their own prefix index and eviction. Blocks arrive by demotion (a device
// block the device pool gives up is copied here) and leave by eviction; a
// prefix lookup that misses the device but hits here is promoted back (a
// copy into a fresh device block). The host copy stays after a promotion, so
// the same block demoted again costs no copy.
//
// A host block is in exactly one state:
//   free      no key, on the free list;
//   stored    holds a key, valid, unreferenced: waits in an evictor, a hit can load it;
//   pinned    referenced by copies in flight: being written by a store (its
//             key is reserved but not valid yet, so nothing loads it) or read
//             by loads. Never evicted, never reused.
// The device pool's ids and these are separate spaces.
//
// Eviction takes duplicates first: a stored block whose key the device also
// caches (it was loaded, or demoted and hit meanwhile) is a second copy, and
// while the device holds the key the host copy saves nothing. Giving those up
// first makes the two tiers hold distinct keys, close to one cache of their
// summed size, where always keeping the host copy would cap them at the host's
// size (issue 17: a 0.7M device over an 8M host held 8M distinct tokens).
// Whether the device holds a key is asked when a duplicate is about to be
// evicted (on_device), so a flag gone stale costs no wrong eviction.
//
// The sole copies are ordered by the configured policy. Under the reuse
// policies (reuse history, adaptive reuse) a block is ranked by when it was
// stored or last used here, how many requests ever used its key (the device
// pool's count-min history, passed in with the store and counted on here) and
// its depth in the prefix chain: on the Mooncake trace LRU over both tiers
// keeps ~27% of prompt tokens where the offline optimum keeps ~35%, and the
// whole gap is blocks stored that are never used again (an oracle that stores
// only blocks with a future use, under LRU, reaches the optimum);
// keys used by more requests are the ones more likely to be used again.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/kv/block_hash.h"
#include "sluice/kv/eviction_policy.h"
#include "sluice/kv/evictor.h"

namespace sluice {

struct HostTierCounters {
  std::int64_t num_stored_blocks = 0;   // stores completed
  std::int64_t num_failed_stores = 0;
  std::int64_t num_loaded_blocks = 0;   // loads started (each a promotion)
  std::int64_t num_evicted_blocks = 0;
};

class HostTier {
 public:
  // reuse: the reuse policies' weights, in releases of this tier's evictor
  // (ignored by LRU/SLRU).
  HostTier(std::int32_t num_blocks, EvictionPolicy eviction, ReuseHistoryParams reuse = {});

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(ref_count_.size()); }
  // Blocks a store can take: free + stored.
  std::int32_t num_available_blocks() const {
    return static_cast<std::int32_t>(free_list_.size()) + num_stored_blocks();
  }
  std::int32_t num_stored_blocks() const { return evictor_.size() + duplicates_.size(); }
  // Of those, the ones last known to be cached on the device too.
  std::int32_t num_duplicate_blocks() const { return duplicates_.size(); }
  std::int32_t num_pinned_blocks() const { return num_blocks() - num_available_blocks(); }
  std::int32_t ref_count(BlockId block) const { return ref_count_[index(block)]; }
  // The host block holding this key, if its contents are valid (a store in
  // flight does not count).
  std::optional<BlockId> lookup(BlockHash hash) const;
  // Whether the key is here or being stored (a second store would be a waste).
  bool holds_or_stores(BlockHash hash) const { return index_.contains(hash); }
  // The key of a stored or storing block.
  BlockHash key(BlockId block) const { return hash_[index(block)].value(); }
  const HostTierCounters& counters() const { return counters_; }

  // Whether the device caches a key now (the KV manager's pool); empty: never.
  using OnDevice = std::function<bool(BlockHash)>;

  // A store of `hash` begins: a host block (evicting a stored one if no free
  // one is left: a duplicate still on the device first) is pinned for it.
  // nullopt when every block is pinned. signals: what the device knew of the
  // block (its key's uses so far and its depth rank it under the reuse policies).
  std::optional<BlockId> begin_store(BlockHash hash, const OnDevice& on_device = {},
                                     const EvictionSignals& signals = {});
  // The store's copy completed; ok: the block becomes a valid stored block,
  // else it is freed. on_device: the device kept the key (a hit took the
  // demoting block meanwhile).
  void finish_store(BlockId block, bool ok, bool on_device = false);
  // A load begins / ends: the block is pinned meanwhile. A load is a hit, so
  // the block goes back to the evictor as recently used; on_device: the load
  // put the key on the device (the usual case), making this a duplicate.
  void pin_for_load(BlockId block);
  void unpin(BlockId block, bool on_device = false);
  // A use of the key found here: it counts as a use. on_device: whether the
  // device keeps the key (a swap-out leaves it cached there; a demotion does not).
  // times_seen: the device's count of the key's uses, if it keeps one (0: count one more).
  void touch(BlockId block, bool on_device = false, std::int32_t times_seen = 0);
  // Adaptive reuse: the weight of the count and depth terms (kv_cache_manager
  // learns it against an LRU of both tiers' size; Evictor::set_reuse_scale).
  void set_reuse_scale(double scale) { evictor_.set_reuse_scale(scale); }
  double reuse_scale() const { return evictor_.reuse_scale(); }
  EvictionPolicy eviction() const { return eviction_; }

  void check_invariants() const;

 private:
  std::size_t index(BlockId block) const;
  void evict_one(const OnDevice& on_device);
  // Into the evictor its on-device flag names, as most recently used.
  void insert_stored(BlockId block);
  void remove_stored(BlockId block);

  std::vector<std::int32_t> ref_count_;         // [num_blocks] copies in flight
  std::vector<std::optional<BlockHash>> hash_;  // [num_blocks]
  std::vector<bool> valid_;                     // [num_blocks] contents arrived
  std::vector<std::int32_t> num_uses_;          // [num_blocks] loads + re-demotions since stored
  std::vector<bool> on_device_;                 // [num_blocks] last known: the device caches its key too
  std::vector<std::int32_t> times_seen_;        // [num_blocks] requests that used its key (reuse policies)
  std::vector<std::int32_t> depth_;             // [num_blocks] its position in the prefix chain, in blocks
  EvictionPolicy eviction_;
  std::vector<BlockId> free_list_;
  std::unordered_map<BlockHash, BlockId> index_;  // stored and being stored
  Evictor evictor_;     // stored sole copies, in the configured order
  Evictor duplicates_;  // stored copies of keys the device caches too: LRU, evicted first
  HostTierCounters counters_;
};

}  // namespace sluice
