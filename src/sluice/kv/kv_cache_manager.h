// KvCacheManager: which KV blocks each sequence owns, and the prefix cache
// over them. Plan, then commit: match_prefix / probe_prefix / num_blocks_needed
// / can_allocate change nothing (their answers are valid until the next
// mutation); commit(), cache_computed_blocks() and free() are the only
// mutations, and only the engine thread calls them.
//
// Lengths, per sequence: num_cached_tokens <= num_computed_tokens <= num_tokens
// <= num_allocated_blocks * block_size_tokens.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/common/result.h"
#include "sluice/kv/block_hash.h"
#include "sluice/kv/block_pool.h"
#include "sluice/kv/eviction_policy.h"

namespace sluice {

struct KvCacheConfig {
  std::int32_t num_blocks = 0;
  std::int32_t block_size_tokens = 16;
  bool enable_prefix_caching = true;
  EvictionPolicy eviction = EvictionPolicy::kSlru;
  double slru_protected_fraction = 0.5;  // of num_blocks
  // Prefix-aware policy (eviction_policy.h): a never-hit block this many
  // tokens past its request's prefix hit joins the cold tier (the start; it
  // adapts by the step, admission_window.h); one doubling of a block's hits is
  // worth prefix_hit_weight * num_blocks releases.
  std::int32_t prefix_admit_window_tokens = 2048;
  std::int32_t prefix_admit_window_step_tokens = 512;
  double prefix_hit_weight = 0.5;
};

// The cached blocks that hold a prefix of some token sequence.
struct PrefixMatch {
  std::vector<BlockId> blocks;  // blocks[i] holds tokens [i*bs, (i+1)*bs)
  std::int32_t num_cached_tokens = 0;
};

// The same as a count, without building the vector: what admission needs.
struct PrefixProbe {
  std::int32_t num_hit_blocks = 0;
  std::int32_t num_hit_free_blocks = 0;  // of those, currently cached free: taking them uses up available blocks
};

struct KvAllocation {
  SequenceId seq_id = 0;
  // After commit, the sequence's blocks cover positions [0, num_tokens).
  std::int32_t num_tokens = 0;
  // For a sequence that has no blocks yet: the prefix hit it starts from.
  PrefixMatch prefix;
  // For the hit-rate counters: how many prompt tokens looked the prefix up
  // (0 for a sequence that already has blocks).
  std::int32_t num_queried_tokens = 0;
};

struct KvCacheCounters {
  std::int64_t num_queried_tokens = 0;
  std::int64_t num_hit_tokens = 0;
  std::int64_t num_evicted_blocks = 0;
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);

  // --- queries -----------------------------------------------------------
  // Longest cached prefix of the sequence whose full-block keys are
  // `block_hashes`, capped at max_cached_tokens (the caller keeps at least the
  // last token to compute, so there is something to sample from).
  PrefixMatch match_prefix(std::span<const BlockHash> block_hashes, std::int32_t max_cached_tokens) const;
  PrefixProbe probe_prefix(std::span<const BlockHash> block_hashes, std::int32_t max_cached_tokens) const;
  // Continues an earlier probe past its last hit. Valid while no block has
  // been evicted since that probe (num_evicted_blocks() unchanged): blocks
  // leave the cache only by eviction, so the earlier hits still stand. Its
  // num_hit_free_blocks is then approximate (others may have taken or freed
  // those blocks since), which admission tolerates: commit() re-checks.
  void extend_probe(std::span<const BlockHash> block_hashes, std::int32_t max_cached_tokens,
                    PrefixProbe& probe) const;
  std::int64_t num_evicted_blocks() const { return pool_.counters().num_evicted_blocks; }
  // Blocks commit() would have to take from the pool for the sequence to hold
  // num_tokens tokens, given num_hit_blocks of them come from the cache (new sequences).
  std::int32_t num_blocks_needed(SequenceId seq_id, std::int32_t num_tokens, std::int32_t num_hit_blocks = 0) const;
  bool can_allocate(std::int32_t num_new_blocks, std::int32_t num_hit_free_blocks = 0) const {
    return num_new_blocks + num_hit_free_blocks <= pool_.num_available_blocks();
  }
  bool has_sequence(SequenceId seq_id) const { return sequences_.contains(seq_id); }
  std::span<const BlockId> block_table(SequenceId seq_id) const;
  std::int32_t num_blocks() const { return pool_.num_blocks(); }
  std::int32_t num_available_blocks() const { return pool_.num_available_blocks(); }
  std::int32_t num_cached_free_blocks() const { return pool_.num_cached_free_blocks(); }
  std::int32_t num_protected_free_blocks() const { return pool_.num_protected_free_blocks(); }
  std::int32_t block_size_tokens() const { return config_.block_size_tokens; }
  std::int32_t num_sequences() const { return static_cast<std::int32_t>(sequences_.size()); }
  KvCacheCounters counters() const;
  const BlockPool& pool() const { return pool_; }

  // --- mutations ---------------------------------------------------------
  // Takes the prefix hit's blocks and enough new blocks; on failure (not
  // enough available) nothing changes.
  Status commit(const KvAllocation& allocation);
  // Registers the sequence's full blocks inside [0, num_computed_tokens) in
  // the prefix cache, so later requests can hit them (no-op without caching).
  void cache_computed_blocks(SequenceId seq_id, std::span<const BlockHash> block_hashes,
                             std::int32_t num_computed_tokens);
  // Releases every block of the sequence (preemption, finish, abort).
  void free(SequenceId seq_id);

  void check_invariants() const;

 private:
  struct Sequence {
    std::vector<BlockId> blocks;
    std::int32_t num_registered_blocks = 0;  // blocks[0, n) are in the prefix cache or were offered to it
    std::int32_t num_prefix_hit_blocks = 0;  // blocks[0, n) came from the prefix hit at admission
  };

  KvCacheConfig config_;
  BlockPool pool_;
  std::unordered_map<SequenceId, Sequence> sequences_;
  std::int64_t num_queried_tokens_ = 0;
  std::int64_t num_hit_tokens_ = 0;
};

}  // namespace sluice
