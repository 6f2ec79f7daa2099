#include "sluice/kv/host_tier.h"

#include "sluice/common/check.h"

namespace sluice {

HostTier::HostTier(std::int32_t num_blocks, EvictionPolicy eviction)
    : ref_count_(static_cast<std::size_t>(num_blocks), 0),
      hash_(static_cast<std::size_t>(num_blocks)),
      valid_(static_cast<std::size_t>(num_blocks), false),
      num_uses_(static_cast<std::size_t>(num_blocks), 0),
      evictor_(eviction, num_blocks, num_blocks / 2) {
  SLUICE_CHECK(num_blocks > 0);
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

void HostTier::evict_one() {
  const std::optional<BlockId> victim = evictor_.pop_victim();
  SLUICE_CHECK_MSG(victim.has_value(), "host evict_one with an empty evictor");
  const std::size_t i = index(*victim);
  index_.erase(*hash_[i]);
  hash_[i].reset();
  valid_[i] = false;
  num_uses_[i] = 0;
  free_list_.push_back(*victim);
  ++counters_.num_evicted_blocks;
}

std::optional<BlockId> HostTier::begin_store(BlockHash hash) {
  SLUICE_CHECK_MSG(!index_.contains(hash), "a second store of a key the host tier holds");
  if (num_available_blocks() == 0) return std::nullopt;
  if (free_list_.empty()) evict_one();
  const BlockId b = free_list_.back();
  free_list_.pop_back();
  const std::size_t i = index(b);
  ref_count_[i] = 1;
  hash_[i] = hash;
  valid_[i] = false;
  index_.emplace(hash, b);
  return b;
}

void HostTier::finish_store(BlockId block, bool ok) {
  const std::size_t i = index(block);
  SLUICE_CHECK_EQ(ref_count_[i], 1);
  SLUICE_CHECK(!valid_[i] && hash_[i].has_value());
  ref_count_[i] = 0;
  if (ok) {
    valid_[i] = true;
    ++counters_.num_stored_blocks;
    evictor_.insert(block, EvictionSignals{});
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
  if (ref_count_[i] == 0) evictor_.remove(block);
  ++ref_count_[i];
  if (num_uses_[i] < (1 << 20)) ++num_uses_[i];
  ++counters_.num_loaded_blocks;
}

void HostTier::unpin(BlockId block) {
  const std::size_t i = index(block);
  SLUICE_CHECK(ref_count_[i] > 0 && valid_[i]);
  if (--ref_count_[i] == 0) evictor_.insert(block, EvictionSignals{.num_hits = num_uses_[i]});
}

void HostTier::touch(BlockId block) {
  const std::size_t i = index(block);
  SLUICE_CHECK(valid_[i]);
  if (num_uses_[i] < (1 << 20)) ++num_uses_[i];
  if (ref_count_[i] > 0) return;  // back in the evictor, as recent, when its loads end
  evictor_.remove(block);
  evictor_.insert(block, EvictionSignals{.num_hits = num_uses_[i]});
}

void HostTier::check_invariants() const {
  evictor_.check_invariants();
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
    const int states = (ref_count_[i] > 0 ? 1 : 0) + (evictor_.contains(b) ? 1 : 0) + (on_free_list[i] ? 1 : 0);
    SLUICE_CHECK_EQ(states, 1);
    if (evictor_.contains(b)) SLUICE_CHECK(valid_[i]);
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
