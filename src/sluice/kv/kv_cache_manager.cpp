#include "sluice/kv/kv_cache_manager.h"

#include <algorithm>
#include <string>

#include "sluice/common/check.h"

namespace sluice {
namespace {

std::int32_t protected_capacity(const KvCacheConfig& config) {
  return static_cast<std::int32_t>(static_cast<double>(config.num_blocks) * config.slru_protected_fraction);
}

std::int32_t ceil_div(std::int32_t a, std::int32_t b) { return (a + b - 1) / b; }

PrefixAwareParams prefix_aware_params(const KvCacheConfig& config) {
  return PrefixAwareParams{
      .admit_window_blocks = ceil_div(config.prefix_admit_window_tokens, config.block_size_tokens),
      .admit_window_step_blocks = ceil_div(config.prefix_admit_window_step_tokens, config.block_size_tokens),
      .hit_weight_blocks = config.prefix_hit_weight * static_cast<double>(config.num_blocks)};
}

}  // namespace

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config),
      pool_(config.num_blocks, config.eviction, protected_capacity(config), prefix_aware_params(config)) {
  SLUICE_CHECK(config.block_size_tokens > 0);
  SLUICE_CHECK(config.prefix_admit_window_tokens >= 0 && config.prefix_hit_weight >= 0.0);
  SLUICE_CHECK(config.prefix_admit_window_step_tokens > 0);
  SLUICE_CHECK(config.slru_protected_fraction >= 0.0 && config.slru_protected_fraction <= 1.0);
}

PrefixMatch KvCacheManager::match_prefix(std::span<const BlockHash> block_hashes,
                                         std::int32_t max_cached_tokens) const {
  PrefixMatch match;
  if (!config_.enable_prefix_caching) return match;
  const auto max_blocks = static_cast<std::size_t>(std::max(0, max_cached_tokens) / config_.block_size_tokens);
  for (std::size_t i = 0; i < std::min(max_blocks, block_hashes.size()); ++i) {
    const std::optional<BlockId> block = pool_.lookup(block_hashes[i]);
    if (!block) break;
    match.blocks.push_back(*block);
  }
  match.num_cached_tokens = static_cast<std::int32_t>(match.blocks.size()) * config_.block_size_tokens;
  return match;
}

PrefixProbe KvCacheManager::probe_prefix(std::span<const BlockHash> block_hashes,
                                         std::int32_t max_cached_tokens) const {
  PrefixProbe probe;
  if (!config_.enable_prefix_caching) return probe;
  const auto max_blocks = static_cast<std::size_t>(std::max(0, max_cached_tokens) / config_.block_size_tokens);
  for (std::size_t i = 0; i < std::min(max_blocks, block_hashes.size()); ++i) {
    const std::optional<BlockId> block = pool_.lookup(block_hashes[i]);
    if (!block) break;
    ++probe.num_hit_blocks;
    if (pool_.ref_count(*block) == 0) ++probe.num_hit_free_blocks;
  }
  return probe;
}

void KvCacheManager::extend_probe(std::span<const BlockHash> block_hashes, std::int32_t max_cached_tokens,
                                  PrefixProbe& probe) const {
  if (!config_.enable_prefix_caching) return;
  const auto max_blocks = static_cast<std::size_t>(std::max(0, max_cached_tokens) / config_.block_size_tokens);
  for (auto i = static_cast<std::size_t>(probe.num_hit_blocks); i < std::min(max_blocks, block_hashes.size()); ++i) {
    const std::optional<BlockId> block = pool_.lookup(block_hashes[i]);
    if (!block) break;
    ++probe.num_hit_blocks;
    if (pool_.ref_count(*block) == 0) ++probe.num_hit_free_blocks;
  }
}

std::int32_t KvCacheManager::num_blocks_needed(SequenceId seq_id, std::int32_t num_tokens,
                                               std::int32_t num_hit_blocks) const {
  const std::int32_t total = ceil_div(num_tokens, config_.block_size_tokens);
  const auto it = sequences_.find(seq_id);
  const std::int32_t have =
      it == sequences_.end() ? num_hit_blocks : static_cast<std::int32_t>(it->second.blocks.size());
  return std::max(0, total - have);
}

std::span<const BlockId> KvCacheManager::block_table(SequenceId seq_id) const {
  const auto it = sequences_.find(seq_id);
  if (it == sequences_.end()) return {};
  return it->second.blocks;
}

KvCacheCounters KvCacheManager::counters() const {
  return KvCacheCounters{.num_queried_tokens = num_queried_tokens_,
                         .num_hit_tokens = num_hit_tokens_,
                         .num_evicted_blocks = pool_.counters().num_evicted_blocks};
}

Status KvCacheManager::commit(const KvAllocation& allocation) {
  const auto it = sequences_.find(allocation.seq_id);
  const bool is_new = it == sequences_.end();
  SLUICE_CHECK_MSG(is_new || allocation.prefix.blocks.empty(), "a prefix hit for a sequence that has blocks");
  const auto num_hit_blocks = static_cast<std::int32_t>(allocation.prefix.blocks.size());
  std::int32_t num_hit_free_blocks = 0;
  for (BlockId b : allocation.prefix.blocks) num_hit_free_blocks += pool_.ref_count(b) == 0 ? 1 : 0;
  const std::int32_t num_new_blocks = num_blocks_needed(allocation.seq_id, allocation.num_tokens, num_hit_blocks);
  if (!can_allocate(num_new_blocks, num_hit_free_blocks)) {
    return Error{"KV cache full: need " + std::to_string(num_new_blocks + num_hit_free_blocks) +
                 " blocks, " + std::to_string(pool_.num_available_blocks()) + " available"};
  }
  // Take the hits first: a cached free block that is about to be reused must
  // not be evicted to make room for the new blocks.
  Sequence& seq = is_new ? sequences_[allocation.seq_id] : it->second;
  for (BlockId b : allocation.prefix.blocks) {
    pool_.touch(b);
    seq.blocks.push_back(b);
  }
  if (is_new) {
    seq.num_registered_blocks = num_hit_blocks;
    seq.num_prefix_hit_blocks = num_hit_blocks;
    num_queried_tokens_ += allocation.num_queried_tokens;
    num_hit_tokens_ += allocation.prefix.num_cached_tokens;
  }
  for (BlockId b : pool_.allocate(num_new_blocks)) seq.blocks.push_back(b);
  return Ok{};
}

void KvCacheManager::cache_computed_blocks(SequenceId seq_id, std::span<const BlockHash> block_hashes,
                                           std::int32_t num_computed_tokens) {
  if (!config_.enable_prefix_caching) return;
  const auto it = sequences_.find(seq_id);
  SLUICE_CHECK_MSG(it != sequences_.end(), "cache_computed_blocks of an unknown sequence");
  Sequence& seq = it->second;
  const auto num_full = std::min<std::size_t>(
      {static_cast<std::size_t>(num_computed_tokens / config_.block_size_tokens), block_hashes.size(),
       seq.blocks.size()});
  for (auto i = static_cast<std::size_t>(seq.num_registered_blocks); i < num_full; ++i) {
    // The block right after the prefix hit, seen for the first time: where the hit stopped.
    if (i == static_cast<std::size_t>(seq.num_prefix_hit_blocks)) pool_.note_first_miss(block_hashes[i]);
    pool_.register_hash(seq.blocks[i], block_hashes[i]);
  }
  seq.num_registered_blocks = std::max(seq.num_registered_blocks, static_cast<std::int32_t>(num_full));
}

void KvCacheManager::free(SequenceId seq_id) {
  const auto it = sequences_.find(seq_id);
  if (it == sequences_.end()) return;
  // Tail first: under LRU the end of a prompt is evicted before its start,
  // which is the part other requests share.
  const std::vector<BlockId>& blocks = it->second.blocks;
  for (auto i = static_cast<std::int32_t>(blocks.size()) - 1; i >= 0; --i) {
    pool_.release(blocks[static_cast<std::size_t>(i)], std::max(0, i - it->second.num_prefix_hit_blocks));
  }
  sequences_.erase(it);
}

void KvCacheManager::check_invariants() const {
  pool_.check_invariants();
  std::vector<std::int32_t> references(static_cast<std::size_t>(pool_.num_blocks()), 0);
  for (const auto& [id, seq] : sequences_) {
    SLUICE_CHECK_LE(seq.num_registered_blocks, static_cast<std::int32_t>(seq.blocks.size()));
    for (BlockId b : seq.blocks) ++references[static_cast<std::size_t>(b)];
  }
  for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
    SLUICE_CHECK_EQ(pool_.ref_count(b), references[static_cast<std::size_t>(b)]);
  }
}

}  // namespace sluice
