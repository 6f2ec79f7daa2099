#include "sluice/kv/kv_cache_manager.h"

#include <algorithm>
#include <cmath>
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

bool ranks_by_reuse(EvictionPolicy policy) {
  return policy == EvictionPolicy::kReuseHistory || policy == EvictionPolicy::kAdaptiveReuse;
}

// The count-min sketch's width: 64 counters per device block by default, and
// with a host tier that ranks by the counts at least 8 per block of both
// tiers (the keys it must tell apart live as long as the hierarchy holds them).
std::int64_t history_counters_per_row(const KvCacheConfig& config) {
  const std::int64_t device = static_cast<std::int64_t>(config.reuse_history_counters_per_block) * config.num_blocks;
  if (config.num_host_blocks == 0 || !ranks_by_reuse(config.host_eviction)) return device;
  return std::max(device, std::int64_t{8} * (std::int64_t{config.num_blocks} + config.num_host_blocks));
}

ReuseHistoryParams host_reuse_params(const KvCacheConfig& config) {
  return ReuseHistoryParams{
      .seen_weight_blocks = config.host_reuse_seen_weight * static_cast<double>(config.num_host_blocks),
      .depth_weight_blocks = config.host_reuse_depth_weight_blocks};
}

ReuseHistoryParams reuse_history_params(const KvCacheConfig& config) {
  return ReuseHistoryParams{.seen_weight_blocks = config.reuse_seen_weight * static_cast<double>(config.num_blocks),
                            .depth_weight_blocks = config.reuse_depth_weight_blocks};
}

}  // namespace

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config),
      pool_(config.num_blocks, config.eviction, protected_capacity(config), prefix_aware_params(config),
            reuse_history_params(config), history_counters_per_row(config),
            config.num_blocks + config.num_host_blocks,
            /*keep_reuse_history=*/config.num_host_blocks > 0 && ranks_by_reuse(config.host_eviction)) {
  SLUICE_CHECK(config.block_size_tokens > 0);
  SLUICE_CHECK(config.num_host_blocks >= 0 && config.demote_watermark_blocks >= 0);
  SLUICE_CHECK(config.host_reuse_seen_weight >= 0.0 && config.host_reuse_depth_weight_blocks >= 0.0);
  if (config.num_host_blocks > 0) {
    host_.emplace(config.num_host_blocks, config.host_eviction, host_reuse_params(config));
    if (config.host_eviction == EvictionPolicy::kAdaptiveReuse) {
      // As on the device: starts trusting the counts, and a device-full of hit
      // blocks won or lost against the shadow LRU (of both tiers' size) spans
      // the range. (A hierarchy-full was too slow: on the synthetic sessions
      // the counts lost half a point and the scale moved less than an eighth.)
      // It learns from the hierarchy's real hit, not from a reuse shadow
      // (session 13): one cache of both tiers' size in the host's order does
      // not see what the LRU device in front costs (on the synthetic sessions
      // it tied the LRU shadow and kept the scale at 0.92, 88.41% in the
      // engine against 88.58%), and the hierarchy at scale 0 is not one LRU,
      // so the old rule has no absorbing state to escape here.
      host_counterfactual_.emplace(1.0, 1.0 / static_cast<double>(config.num_blocks),
                                   config.num_blocks + config.num_host_blocks);
    }
  }
  SLUICE_CHECK(config.prefix_admit_window_tokens >= 0 && config.prefix_hit_weight >= 0.0);
  SLUICE_CHECK(config.prefix_admit_window_step_tokens > 0);
  SLUICE_CHECK(config.slru_protected_fraction >= 0.0 && config.slru_protected_fraction <= 1.0);
  SLUICE_CHECK(config.reuse_seen_weight >= 0.0 && config.reuse_depth_weight_blocks >= 0.0);
  SLUICE_CHECK(config.reuse_history_counters_per_block > 0);
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
  if (!host_) return match;
  for (std::size_t i = match.blocks.size(); i < std::min(max_blocks, block_hashes.size()); ++i) {
    const std::optional<BlockId> block = host_->lookup(block_hashes[i]);
    if (!block) break;
    match.host_blocks.push_back(*block);
  }
  return match;
}

PrefixProbe KvCacheManager::probe_prefix(std::span<const BlockHash> block_hashes,
                                         std::int32_t max_cached_tokens) const {
  PrefixProbe probe;
  extend_probe(block_hashes, max_cached_tokens, probe);
  return probe;
}

void KvCacheManager::extend_probe(std::span<const BlockHash> block_hashes, std::int32_t max_cached_tokens,
                                  PrefixProbe& probe) const {
  if (!config_.enable_prefix_caching) return;
  const auto max_blocks = static_cast<std::size_t>(std::max(0, max_cached_tokens) / config_.block_size_tokens);
  const std::size_t end = std::min(max_blocks, block_hashes.size());
  // The device hit grows only while the host part is empty: past a host hit
  // the chain continues on the host (a promotion landing later is found by
  // the next full probe).
  auto i = static_cast<std::size_t>(probe.num_hit_blocks + probe.num_host_hit_blocks);
  for (; probe.num_host_hit_blocks == 0 && i < end; ++i) {
    const std::optional<BlockId> block = pool_.lookup(block_hashes[i]);
    if (!block) break;
    ++probe.num_hit_blocks;
    if (pool_.ref_count(*block) == 0) ++probe.num_hit_free_blocks;
  }
  if (!host_) return;
  for (; i < end && host_->lookup(block_hashes[i]); ++i) ++probe.num_host_hit_blocks;
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
  KvCacheCounters c{.num_queried_tokens = num_queried_tokens_,
                    .num_hit_tokens = num_hit_tokens_,
                    .num_evicted_blocks = pool_.counters().num_evicted_blocks,
                    .num_queries_with_device_hits = num_queries_with_device_hits_,
                    .num_host_queried_tokens = num_host_queried_tokens_,
                    .num_host_hit_tokens = num_host_hit_tokens_,
                    .num_queries_with_host_hits = num_queries_with_host_hits_,
                    .num_host_swapped_out_blocks = num_swapped_out_blocks_,
                    .num_failed_copies = num_failed_copies_,
                    .num_demotions_skipped = num_demotions_skipped_,
                    .num_evicted_past_host_admitting = num_evicted_past_host_admitting_,
                    .num_evicted_past_host_growing = num_evicted_past_host_growing_,
                    .num_evicted_past_host_while_demoting = num_evicted_past_host_while_demoting_};
  if (host_) {
    c.num_host_loaded_blocks = host_->counters().num_loaded_blocks;
    c.num_host_stored_blocks = host_->counters().num_stored_blocks;
    c.num_host_evicted_blocks = host_->counters().num_evicted_blocks;
  }
  return c;
}

bool KvCacheManager::is_loading(SequenceId seq_id) const {
  const auto it = sequences_.find(seq_id);
  return it != sequences_.end() && it->second.num_loading_blocks > 0;
}

bool KvCacheManager::load_failed(SequenceId seq_id) const {
  const auto it = sequences_.find(seq_id);
  return it != sequences_.end() && it->second.load_failed;
}

Status KvCacheManager::commit(const KvAllocation& allocation) {
  const auto it = sequences_.find(allocation.seq_id);
  const bool is_new = it == sequences_.end();
  SLUICE_CHECK_MSG(is_new || (allocation.prefix.blocks.empty() && allocation.prefix.host_blocks.empty()),
                   "a prefix hit for a sequence that has blocks");
  const auto num_hit_blocks = static_cast<std::int32_t>(allocation.prefix.blocks.size());
  const auto num_load_blocks = static_cast<std::int32_t>(allocation.prefix.host_blocks.size());
  SLUICE_CHECK_MSG(num_load_blocks == 0 || host_, "host blocks to load without a host tier");
  SLUICE_CHECK_LE((num_hit_blocks + num_load_blocks) * config_.block_size_tokens, allocation.num_tokens);
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
    seq.instance = next_instance_++;
    seq.num_registered_blocks = num_hit_blocks + num_load_blocks;
    seq.num_prefix_hit_blocks = num_hit_blocks + num_load_blocks;
    seq.num_device_hit_blocks = num_hit_blocks;
    num_queried_tokens_ += allocation.num_queried_tokens;
    num_hit_tokens_ += allocation.prefix.num_cached_tokens;
    if (num_hit_blocks > 0) ++num_queries_with_device_hits_;
    if (host_) num_host_queried_tokens_ += std::max(0, allocation.num_queried_tokens - allocation.prefix.num_cached_tokens);
    if (num_load_blocks > 0) {
      ++num_queries_with_host_hits_;
      num_host_hit_tokens_ += static_cast<std::int64_t>(num_load_blocks) * config_.block_size_tokens;
    }
  }
  const std::int64_t evicted_before = pool_.counters().num_evicted_blocks;
  const std::vector<BlockId> fresh = pool_.allocate(num_new_blocks);
  // Allocation evicts directly when demotion has not kept enough free: those keys never reach the host.
  if (host_) {
    const std::int64_t num_past = pool_.counters().num_evicted_blocks - evicted_before;
    num_demotions_skipped_ += num_past;
    (is_new ? num_evicted_past_host_admitting_ : num_evicted_past_host_growing_) += num_past;
    if (num_demoting_blocks_ > 0) num_evicted_past_host_while_demoting_ += num_past;
  }
  for (std::int32_t j = 0; j < num_load_blocks; ++j) {
    // The load's own references: the device block and the host block outlive
    // the sequence if it ends first.
    const BlockId device = fresh[static_cast<std::size_t>(j)];
    const BlockId host = allocation.prefix.host_blocks[static_cast<std::size_t>(j)];
    pool_.add_reference(device);
    host_->pin_for_load(host);
    add_copy({.direction = KvCopyDirection::kHostToDevice,
              .device_block = device,
              .host_block = host,
              .hash = host_->key(host),
              .seq_id = allocation.seq_id,
              .instance = seq.instance});
    ++seq.num_loading_blocks;
  }
  seq.blocks.insert(seq.blocks.end(), fresh.begin(), fresh.end());
  return Ok{};
}

void KvCacheManager::cache_computed_blocks(SequenceId seq_id, std::span<const BlockHash> block_hashes,
                                           std::int32_t num_computed_tokens) {
  if (!config_.enable_prefix_caching) return;
  const auto it = sequences_.find(seq_id);
  SLUICE_CHECK_MSG(it != sequences_.end(), "cache_computed_blocks of an unknown sequence");
  Sequence& seq = it->second;
  // Adaptive reuse compares the request's hit with LRU's (block_pool.h): with a
  // host tier, what both tiers gave against an LRU of both tiers' size, since
  // what the device evicts is what the host gets.
  if (seq.num_keys_noted == 0) {
    pool_.note_request(block_hashes, host_ ? seq.num_prefix_hit_blocks : seq.num_device_hit_blocks);
    if (host_counterfactual_) {
      host_counterfactual_->on_request(block_hashes, seq.num_prefix_hit_blocks, pool_.reuse_history());
      follow_host_scale();
    }
  } else if (block_hashes.size() > seq.num_keys_noted) {
    pool_.note_more_keys(block_hashes.subspan(seq.num_keys_noted), seq.num_keys_noted);
    if (host_counterfactual_) {
      host_counterfactual_->on_more_keys(block_hashes.subspan(seq.num_keys_noted), seq.num_keys_noted,
                                         pool_.reuse_history());
    }
  }
  seq.num_keys_noted = std::max(seq.num_keys_noted, block_hashes.size());
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
    pool_.release(blocks[static_cast<std::size_t>(i)], std::max(0, i - it->second.num_prefix_hit_blocks), i);
  }
  sequences_.erase(it);
}

std::int32_t KvCacheManager::swap_out(SequenceId seq_id, std::span<const BlockHash> block_hashes) {
  const auto it = sequences_.find(seq_id);
  if (it == sequences_.end()) return 0;
  std::int32_t num_stores = 0;
  const Sequence& seq = it->second;
  const auto num_keyed = std::min<std::size_t>(static_cast<std::size_t>(seq.num_registered_blocks), block_hashes.size());
  for (std::size_t i = 0; host_ && config_.enable_prefix_caching && i < num_keyed; ++i) {
    const BlockId b = seq.blocks[i];
    const BlockHash hash = block_hashes[i];
    // Shared blocks stay on the device for their other holders; a block whose
    // key another block registered first holds nothing hittable; a block in a
    // load has no valid contents yet.
    if (pool_.ref_count(b) != 1 || pool_.lookup(hash) != b) continue;
    if (const std::optional<BlockId> held = host_->lookup(hash)) {
      host_->touch(*held, /*on_device=*/true, pool_.times_seen(hash));  // the block stays cached on the device
      continue;
    }
    if (host_->holds_or_stores(hash)) continue;
    const std::optional<BlockId> host = host_->begin_store(
        hash, on_device(), {.times_seen = pool_.times_seen(hash), .depth_blocks = static_cast<std::int32_t>(i)});
    if (!host) break;  // every host block is in a copy: the rest is recomputed
    pool_.add_reference(b);
    add_copy({.direction = KvCopyDirection::kDeviceToHost,
              .device_block = b,
              .host_block = *host,
              .hash = hash,
              .swap = true,
              .novel_depth_blocks = std::max(0, static_cast<std::int32_t>(i) - seq.num_prefix_hit_blocks),
              .depth_blocks = static_cast<std::int32_t>(i)});
    ++num_swapping_blocks_;
    ++num_stores;
  }
  num_swapped_out_blocks_ += num_stores;
  free(seq_id);
  return num_stores;
}

void KvCacheManager::follow_host_scale() {
  if (const auto scale = reuse_scale_to_follow(host_->reuse_scale(), host_counterfactual_->scale()))
    host_->set_reuse_scale(*scale);
}

HostTier::OnDevice KvCacheManager::on_device() const {
  return [this](BlockHash hash) { return pool_.lookup(hash).has_value(); };
}

KvCopyId KvCacheManager::add_copy(const Copy& copy) {
  const KvCopyId id = next_copy_id_++;
  copies_.emplace(id, copy);
  new_copies_.push_back(
      {.id = id, .direction = copy.direction, .device_block = copy.device_block, .host_block = copy.host_block});
  return id;
}

void KvCacheManager::count_skipped_demotion(const BlockPool::Demotion& demotion) {
  ++num_demotions_skipped_;
  pool_.finish_demotion(demotion.block);
}

void KvCacheManager::start_demotions(std::int32_t target_free_blocks) {
  if (!host_) return;
  while (pool_.num_uncached_free_blocks() + num_demoting_blocks_ < target_free_blocks) {
    const std::optional<BlockPool::Demotion> d = pool_.begin_demotion();
    if (!d) return;
    if (const std::optional<BlockId> held = host_->lookup(d->hash)) {
      // Already below: nothing to copy, and the device lets the key go.
      host_->touch(*held, /*on_device=*/false, d->signals.times_seen);
      pool_.finish_demotion(d->block);
      continue;
    }
    if (host_->holds_or_stores(d->hash) || !config_.host_admission.admits(d->signals)) {
      count_skipped_demotion(*d);
      continue;
    }
    const std::optional<BlockId> host = host_->begin_store(d->hash, on_device(), d->signals);
    if (!host) {  // every host block is in a copy: drop it rather than wait
      count_skipped_demotion(*d);
      continue;
    }
    add_copy({.direction = KvCopyDirection::kDeviceToHost, .device_block = d->block, .host_block = *host, .hash = d->hash});
    ++num_demoting_blocks_;
  }
}

bool KvCacheManager::make_room_below(std::int32_t num_new_blocks) {
  if (!host_) return true;
  // The demotions that leave the watermark free behind the load start now,
  // with this step's copies: the next step allocates from what earlier
  // demotions freed (its own land a step later), so a load that took those
  // blocks without them made the next chunks and decodes evict past the host
  // (docs/benchmarks.md, session 9: 60% of the keys lost that way).
  // It goes once one step's worth (half the watermark) stays free besides, for
  // the admissions after it in this step.
  const std::int32_t target = num_new_blocks + config_.demote_watermark_blocks / 2;
  start_demotions(num_new_blocks + config_.demote_watermark_blocks);
  if (pool_.num_uncached_free_blocks() >= target) return true;
  // Nothing more to demote: go now (allocation evicts what it must, or commit fails).
  return pool_.num_uncached_free_blocks() + num_demoting_blocks_ < target;
}

void KvCacheManager::complete_copy(const KvCopyCompletion& completion) {
  const auto it = copies_.find(completion.id);
  SLUICE_CHECK_MSG(it != copies_.end(), "completion of a copy that is not in flight");
  const Copy copy = it->second;
  copies_.erase(it);
  if (!completion.ok) ++num_failed_copies_;
  if (copy.direction == KvCopyDirection::kDeviceToHost) {
    if (copy.swap) {
      pool_.release(copy.device_block, copy.novel_depth_blocks, copy.depth_blocks);
      --num_swapping_blocks_;
    } else {
      pool_.finish_demotion(copy.device_block);
      --num_demoting_blocks_;
    }
    // A swap's block stays cached on the device, and so does a demoting one a hit took meanwhile.
    host_->finish_store(copy.host_block, completion.ok, pool_.lookup(copy.hash).has_value());
    return;
  }
  // A promoted block counts one hit (it was hit below), so SLRU protects it.
  if (completion.ok) pool_.register_hash(copy.device_block, copy.hash, /*num_hits=*/1);
  host_->unpin(copy.host_block, completion.ok && pool_.lookup(copy.hash).has_value());
  pool_.release(copy.device_block);
  const auto seq = sequences_.find(copy.seq_id);
  if (seq == sequences_.end() || seq->second.instance != copy.instance) return;  // it ended meanwhile
  --seq->second.num_loading_blocks;
  if (!completion.ok) seq->second.load_failed = true;
}

void KvCacheManager::check_invariants() const {
  pool_.check_invariants();
  if (host_) host_->check_invariants();
  if (host_counterfactual_) {
    host_counterfactual_->check_invariants();
    SLUICE_CHECK_LT(std::abs(host_->reuse_scale() - host_counterfactual_->scale()), kReuseScaleStep);
  }
  std::vector<std::int32_t> references(static_cast<std::size_t>(pool_.num_blocks()), 0);
  std::vector<std::int32_t> host_references(static_cast<std::size_t>(num_host_blocks()), 0);
  std::unordered_map<SequenceId, std::int32_t> loads;
  std::int32_t num_stores = 0;
  for (const auto& [id, seq] : sequences_) {
    SLUICE_CHECK_LE(seq.num_registered_blocks, static_cast<std::int32_t>(seq.blocks.size()));
    SLUICE_CHECK_LE(0, seq.num_loading_blocks);
    for (BlockId b : seq.blocks) ++references[static_cast<std::size_t>(b)];
  }
  for (const auto& [id, copy] : copies_) {
    ++references[static_cast<std::size_t>(copy.device_block)];
    ++host_references[static_cast<std::size_t>(copy.host_block)];
    if (copy.direction == KvCopyDirection::kDeviceToHost) {
      ++num_stores;
      continue;
    }
    const auto seq = sequences_.find(copy.seq_id);
    if (seq != sequences_.end() && seq->second.instance == copy.instance) ++loads[copy.seq_id];
  }
  SLUICE_CHECK_EQ(num_stores, num_demoting_blocks_ + num_swapping_blocks_);
  for (const auto& [id, seq] : sequences_) {
    const auto it = loads.find(id);
    SLUICE_CHECK_EQ(seq.num_loading_blocks, it == loads.end() ? 0 : it->second);
  }
  for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
    SLUICE_CHECK_EQ(pool_.ref_count(b), references[static_cast<std::size_t>(b)]);
  }
  for (BlockId b = 0; b < num_host_blocks(); ++b) {
    SLUICE_CHECK_EQ(host_->ref_count(b), host_references[static_cast<std::size_t>(b)]);
  }
}

}  // namespace sluice
