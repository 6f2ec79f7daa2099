#include "sluice/kv/host_tier.h"

#include <algorithm>

#include "sluice/common/check.h"

namespace sluice {

HostTier::HostTier(std::int32_t num_blocks, EvictionPolicy eviction, ReuseHistoryParams reuse)
    : ref_count_(static_cast<std::size_t>(num_blocks), 0),
      hash_(static_cast<std::size_t>(num_blocks)),
      valid_(static_cast<std::size_t>(num_blocks), false),
      num_uses_(static_cast<std::size_t>(num_blocks), 0),
      on_device_(static_cast<std::size_t>(num_blocks), false),
      times_seen_(static_cast<std::size_t>(num_blocks), 0),
      depth_(static_cast<std::size_t>(num_blocks), 0),
      eviction_(eviction),
      evictor_(eviction, num_blocks, num_blocks / 2, PrefixAwareParams{}, reuse),
      duplicates_(EvictionPolicy::kLru, num_blocks, 0) {
  SLUICE_CHECK(num_blocks > 0);
  SLUICE_CHECK_MSG(eviction != EvictionPolicy::kPrefixAware,
                   "the host tier does not rank by prefix-aware novelty (its blocks have no request)");
  free_list_.reserve(static_cast<std::size_t>(num_blocks));
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
  index_.reserve(static_cast<std::size_t>(num_blocks));
}

std::size_t HostTier::index(BlockId block) const {
  SLUICE_CHECK(block >= 0 && block < num_blocks());
  return static_cast<std::size_t>(block);
}

std::optional<BlockId> HostTier::lookup(BlockHash hash) const {
  const auto it = index_.find(hash);
  if (it == index_.end() || !valid_[index(it->second)]) return std::nullopt;
  return it->second;
}

void HostTier::insert_stored(BlockId block) {
  const std::size_t i = index(block);
  if (on_device_[i]) {
    duplicates_.insert(block, /*was_hit=*/false);
  } else {
    evictor_.insert(block, EvictionSignals{.num_hits = num_uses_[i], .times_seen = times_seen_[i], .depth_blocks = depth_[i]});
  }
}

void HostTier::evict_one(const OnDevice& on_device) {
  std::optional<BlockId> victim;
  // Duplicates first; one whose key the device has let go since is the only
  // copy now: it moves to the sole copies (as recently used, as a demotion
  // that found it here would have made it) and the search goes on.
  while (!victim && duplicates_.size() > 0) {
    const BlockId b = *duplicates_.pop_victim();
    if (!on_device || on_device(*hash_[index(b)])) {
      victim = b;
      continue;
    }
    on_device_[index(b)] = false;
    insert_stored(b);
  }
  if (!victim) victim = evictor_.pop_victim();
  SLUICE_CHECK_MSG(victim.has_value(), "host evict_one with an empty evictor");
  const std::size_t i = index(*victim);
  index_.erase(*hash_[i]);
  hash_[i].reset();
  valid_[i] = false;
  num_uses_[i] = 0;
  on_device_[i] = false;
  free_list_.push_back(*victim);
  ++counters_.num_evicted_blocks;
}

std::optional<BlockId> HostTier::begin_store(BlockHash hash, const OnDevice& on_device,
                                             const EvictionSignals& signals) {
  SLUICE_CHECK_MSG(!index_.contains(hash), "a second store of a key the host tier holds");
  if (num_available_blocks() == 0) return std::nullopt;
  if (free_list_.empty()) evict_one(on_device);
  const BlockId b = free_list_.back();
  free_list_.pop_back();
  const std::size_t i = index(b);
  ref_count_[i] = 1;
  hash_[i] = hash;
  valid_[i] = false;
  times_seen_[i] = std::max(0, signals.times_seen);
  depth_[i] = std::max(0, signals.depth_blocks);
  index_.emplace(hash, b);
  return b;
}

void HostTier::finish_store(BlockId block, bool ok, bool on_device) {
  const std::size_t i = index(block);
  SLUICE_CHECK_EQ(ref_count_[i], 1);
  SLUICE_CHECK(!valid_[i] && hash_[i].has_value());
  ref_count_[i] = 0;
  if (ok) {
    valid_[i] = true;
    on_device_[i] = on_device;
    ++counters_.num_stored_blocks;
    insert_stored(block);
    return;
  }
  ++counters_.num_failed_stores;
  index_.erase(*hash_[i]);
  hash_[i].reset();
  free_list_.push_back(block);
}

void HostTier::pin_for_load(BlockId block) {
  const std::size_t i = index(block);
  SLUICE_CHECK_MSG(valid_[i], "a load from a host block whose store has not completed");
  if (ref_count_[i] == 0) remove_stored(block);
  ++ref_count_[i];
  if (num_uses_[i] < (1 << 20)) ++num_uses_[i];
  if (times_seen_[i] < (1 << 20)) ++times_seen_[i];  // the loading request uses the key
  ++counters_.num_loaded_blocks;
}

void HostTier::unpin(BlockId block, bool on_device) {
  const std::size_t i = index(block);
  SLUICE_CHECK(ref_count_[i] > 0 && valid_[i]);
  // Any load that landed put the key on the device.
  on_device_[i] = on_device_[i] || on_device;
  if (--ref_count_[i] == 0) insert_stored(block);
}

void HostTier::touch(BlockId block, bool on_device, std::int32_t times_seen) {
  const std::size_t i = index(block);
  SLUICE_CHECK(valid_[i]);
  if (num_uses_[i] < (1 << 20)) ++num_uses_[i];
  if (times_seen > 0) {
    times_seen_[i] = std::max(times_seen_[i], times_seen);
  } else if (times_seen_[i] < (1 << 20)) {
    ++times_seen_[i];
  }
  on_device_[i] = on_device;
  if (ref_count_[i] > 0) return;  // back in an evictor, as recent, when its loads end
  remove_stored(block);
  insert_stored(block);
}

void HostTier::remove_stored(BlockId block) {
  if (duplicates_.contains(block)) {
    duplicates_.remove(block);
  } else {
    evictor_.remove(block);
  }
}

void HostTier::check_invariants() const {
  evictor_.check_invariants();
  duplicates_.check_invariants();
  std::vector<bool> on_free_list(ref_count_.size(), false);
  for (BlockId b : free_list_) {
    const std::size_t i = index(b);
    SLUICE_CHECK_MSG(!on_free_list[i], "host block twice on the free list");
    on_free_list[i] = true;
    SLUICE_CHECK_EQ(ref_count_[i], 0);
    SLUICE_CHECK(!hash_[i].has_value() && !valid_[i]);
  }
  std::size_t num_keyed = 0;
  for (std::size_t i = 0; i < ref_count_.size(); ++i) {
    const auto b = static_cast<BlockId>(i);
    SLUICE_CHECK(ref_count_[i] >= 0);
    const int states = (ref_count_[i] > 0 ? 1 : 0) + (evictor_.contains(b) ? 1 : 0) +
                       (duplicates_.contains(b) ? 1 : 0) + (on_free_list[i] ? 1 : 0);
    SLUICE_CHECK_EQ(states, 1);
    if (evictor_.contains(b) || duplicates_.contains(b)) SLUICE_CHECK(valid_[i]);
    if (evictor_.contains(b)) SLUICE_CHECK(!on_device_[i]);
    if (duplicates_.contains(b)) SLUICE_CHECK(on_device_[i]);
    if (!valid_[i]) SLUICE_CHECK(!on_device_[i]);
    // A pinned block without valid contents is a store in flight: one copy.
    if (ref_count_[i] > 0 && !valid_[i]) SLUICE_CHECK_EQ(ref_count_[i], 1);
    if (hash_[i].has_value()) {
      ++num_keyed;
      const auto it = index_.find(*hash_[i]);
      SLUICE_CHECK(it != index_.end() && it->second == b);
    }
  }
  SLUICE_CHECK_EQ(num_keyed, index_.size());
}

}  // namespace sluice
