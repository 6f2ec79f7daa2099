#include "sluice/kv/block_pool.h"

#include <algorithm>
#include <cmath>

#include "sluice/common/check.h"

namespace sluice {

BlockPool::BlockPool(std::int32_t num_blocks, EvictionPolicy eviction, std::int32_t protected_capacity_blocks,
                     PrefixAwareParams prefix_aware, ReuseHistoryParams reuse_history,
                     std::int64_t history_counters_per_row, std::int32_t shadow_capacity_blocks,
                     bool keep_reuse_history)
    : ref_count_(static_cast<std::size_t>(num_blocks), 0),
      hash_(static_cast<std::size_t>(num_blocks)),
      num_hits_(static_cast<std::size_t>(num_blocks), 0),
      novel_depth_(static_cast<std::size_t>(num_blocks), 0),
      depth_(static_cast<std::size_t>(num_blocks), 0),
      evictor_(eviction, num_blocks, protected_capacity_blocks, prefix_aware, reuse_history) {
  SLUICE_CHECK(num_blocks > 0);
  if (eviction == EvictionPolicy::kPrefixAware) {
    admission_.emplace(prefix_aware.admit_window_blocks, std::max(1, prefix_aware.admit_window_step_blocks),
                       num_blocks, num_blocks);
    evictor_.set_admit_window_blocks(admission_->blocks());
  }
  if (eviction == EvictionPolicy::kReuseHistory || eviction == EvictionPolicy::kAdaptiveReuse || keep_reuse_history) {
    history_.emplace(history_counters_per_row > 0 ? history_counters_per_row : std::int64_t{num_blocks});
  }
  if (eviction == EvictionPolicy::kAdaptiveReuse) {
    // Starts trusting the counts; a cache-full of blocks that the reuse
    // shadow hit more (or fewer) than the LRU shadow spans the range. With a
    // host tier below, the shadows model the hierarchy, which a reuse shadow
    // of both tiers' size at the device's weights does not (on the synthetic
    // sessions it kept the scale up: 86.75% in the engine against SLRU's
    // 88.75%): there the scale learns from the hierarchy's real hit, which
    // at scale 0 is not the LRU shadow's, so the old rule cannot stick.
    const bool hierarchy = shadow_capacity_blocks > 0 && shadow_capacity_blocks != num_blocks;
    counterfactual_.emplace(1.0, 1.0 / static_cast<double>(num_blocks),
                            shadow_capacity_blocks > 0 ? shadow_capacity_blocks : num_blocks,
                            hierarchy ? std::nullopt : std::optional<ReuseHistoryParams>(reuse_history));
  }
  free_list_.reserve(static_cast<std::size_t>(num_blocks));
  // Reverse so that allocation hands out low ids first (readable test timelines).
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
  cached_.reserve(static_cast<std::size_t>(num_blocks));
}

std::size_t BlockPool::index(BlockId block) const {
  SLUICE_CHECK(block >= 0 && block < num_blocks());
  return static_cast<std::size_t>(block);
}

std::optional<BlockId> BlockPool::lookup(BlockHash hash) const {
  const auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::evict_one() {
  const std::optional<BlockId> victim = evictor_.pop_victim();
  SLUICE_CHECK_MSG(victim.has_value(), "evict_one with an empty evictor");
  const std::size_t i = index(*victim);
  cached_.erase(*hash_[i]);
  if (admission_) admission_->on_evicted(*hash_[i], evictor_.last_victim_was_cold());
  hash_[i].reset();
  num_hits_[i] = 0;
  free_list_.push_back(*victim);
  ++counters_.num_evicted_blocks;
}

std::vector<BlockId> BlockPool::allocate(std::int32_t n) {
  SLUICE_CHECK_LE(n, num_available_blocks());
  std::vector<BlockId> blocks;
  blocks.reserve(static_cast<std::size_t>(n));
  for (std::int32_t k = 0; k < n; ++k) {
    if (free_list_.empty()) evict_one();
    const BlockId b = free_list_.back();
    free_list_.pop_back();
    SLUICE_CHECK_EQ(ref_count_[index(b)], 0);
    ref_count_[index(b)] = 1;
    blocks.push_back(b);
  }
  return blocks;
}

void BlockPool::touch(BlockId block) {
  const std::size_t i = index(block);
  SLUICE_CHECK_MSG(hash_[i].has_value(), "touch of a block that is not cached");
  if (ref_count_[i] == 0) evictor_.remove(block);
  ++ref_count_[i];
  // Saturating: the policies read whether it was hit and log2 of how often.
  if (num_hits_[i] < (1 << 20)) ++num_hits_[i];
  if (history_) history_->record(*hash_[i]);
  ++counters_.num_hit_blocks;
}

void BlockPool::add_reference(BlockId block) {
  const std::size_t i = index(block);
  SLUICE_CHECK(ref_count_[i] > 0);
  ++ref_count_[i];
}

void BlockPool::release(BlockId block, std::int32_t novel_depth_blocks, std::optional<std::int32_t> depth_blocks) {
  const std::size_t i = index(block);
  SLUICE_CHECK(ref_count_[i] > 0);
  if (depth_blocks) depth_[i] = *depth_blocks;
  if (--ref_count_[i] > 0) return;
  novel_depth_[i] = novel_depth_blocks;
  if (hash_[i].has_value()) {
    evictor_.insert(block, EvictionSignals{.num_hits = num_hits_[i],
                                           .novel_depth_blocks = novel_depth_blocks,
                                           .times_seen = times_seen(*hash_[i]),
                                           .depth_blocks = depth_[i]});
  } else {
    free_list_.push_back(block);
  }
}

bool BlockPool::register_hash(BlockId block, BlockHash hash, std::int32_t num_hits) {
  const std::size_t i = index(block);
  SLUICE_CHECK(ref_count_[i] > 0);
  SLUICE_CHECK(!hash_[i].has_value());
  SLUICE_CHECK(num_hits >= 0);
  if (history_) history_->record(hash);
  const auto [it, inserted] = cached_.emplace(hash, block);
  if (!inserted) return false;
  hash_[i] = hash;
  num_hits_[i] = num_hits;
  return true;
}

std::optional<BlockPool::Demotion> BlockPool::begin_demotion() {
  const std::optional<BlockId> victim = evictor_.pop_victim();
  if (!victim) return std::nullopt;
  const std::size_t i = index(*victim);
  SLUICE_CHECK(ref_count_[i] == 0 && hash_[i].has_value());
  // The window learns from the key leaving the device, whether or not a lower tier keeps it.
  if (admission_) admission_->on_evicted(*hash_[i], evictor_.last_victim_was_cold());
  ref_count_[i] = 1;
  return Demotion{.block = *victim,
                  .hash = *hash_[i],
                  .signals = {.num_hits = num_hits_[i],
                              .novel_depth_blocks = novel_depth_[i],
                              .times_seen = times_seen(*hash_[i]),
                              .depth_blocks = depth_[i]}};
}

void BlockPool::finish_demotion(BlockId block) {
  const std::size_t i = index(block);
  SLUICE_CHECK(ref_count_[i] > 0 && hash_[i].has_value());
  if (--ref_count_[i] > 0) return;
  cached_.erase(*hash_[i]);
  hash_[i].reset();
  num_hits_[i] = 0;
  free_list_.push_back(block);
  ++counters_.num_evicted_blocks;
}

void BlockPool::note_request(std::span<const BlockHash> keys, std::int32_t num_hit_blocks) {
  if (!counterfactual_) return;
  counterfactual_->on_request(keys, num_hit_blocks, reuse_history());
  follow_scale();
}

void BlockPool::note_more_keys(std::span<const BlockHash> keys, std::size_t first_depth_blocks) {
  if (counterfactual_) counterfactual_->on_more_keys(keys, first_depth_blocks, reuse_history());
}

void BlockPool::follow_scale() {
  if (const auto scale = reuse_scale_to_follow(evictor_.reuse_scale(), counterfactual_->scale()))
    evictor_.set_reuse_scale(*scale);
}

void BlockPool::note_first_miss(BlockHash hash) {
  if (!admission_ || cached_.contains(hash)) return;
  if (admission_->on_first_miss(hash)) evictor_.set_admit_window_blocks(admission_->blocks());
}

void BlockPool::check_invariants() const {
  evictor_.check_invariants();
  if (counterfactual_) {
    counterfactual_->check_invariants();
    SLUICE_CHECK_LT(std::abs(evictor_.reuse_scale() - counterfactual_->scale()), kReuseScaleStep);
  }
  if (admission_) {
    admission_->check_invariants();
    SLUICE_CHECK_EQ(evictor_.admit_window_blocks(), admission_->blocks());
  }
  std::vector<bool> on_free_list(ref_count_.size(), false);
  for (BlockId b : free_list_) {
    const std::size_t i = index(b);
    SLUICE_CHECK_MSG(!on_free_list[i], "block twice on the free list");
    on_free_list[i] = true;
    SLUICE_CHECK_EQ(ref_count_[i], 0);
    SLUICE_CHECK(!hash_[i].has_value());
    SLUICE_CHECK(!evictor_.contains(b));
  }
  std::size_t num_hashed = 0;
  for (std::size_t i = 0; i < ref_count_.size(); ++i) {
    const auto b = static_cast<BlockId>(i);
    SLUICE_CHECK(ref_count_[i] >= 0);
    if (hash_[i].has_value()) {
      ++num_hashed;
      const auto it = cached_.find(*hash_[i]);
      SLUICE_CHECK(it != cached_.end() && it->second == b);
    }
    // Exactly one of: in use, cached free (in the evictor), free (on the list).
    const int states = (ref_count_[i] > 0 ? 1 : 0) + (evictor_.contains(b) ? 1 : 0) + (on_free_list[i] ? 1 : 0);
    SLUICE_CHECK_EQ(states, 1);
    if (evictor_.contains(b)) SLUICE_CHECK(hash_[i].has_value());
  }
  SLUICE_CHECK_EQ(num_hashed, cached_.size());
}

}  // namespace sluice
