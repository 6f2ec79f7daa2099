// KvCacheManager: which KV blocks each sequence owns, the prefix cache over
// them, and the host tier below it (host_tier.h) with the copies between the
// two. Plan, then commit: match_prefix / probe_prefix / num_blocks_needed /
// can_allocate change nothing (their answers are valid until the next
// mutation); commit(), cache_computed_blocks(), free(), start_demotions() and
// complete_copy() are the only mutations, and only the engine thread calls them.
//
// Copies (common/kv_copy.h). A copy holds a reference on its device block and
// its host block until complete_copy(), so neither is evicted, reused or freed
// while it runs, whatever happens to the sequence that asked for it (abort,
// preemption, finish):
//   demotion  (device -> host) start_demotions() keeps `demote_watermark_blocks`
//             device blocks free ahead of allocation: it takes the device
//             evictor's next victims and stores those the host admits and
//             lacks; their keys stay hittable on the device until the store
//             completes, then leave it.
//   swap-out  (device -> host) swap_out() preempts a sequence by storing the
//             registered blocks only it holds (admission is not asked: the
//             planner chose to swap), then frees it. Each block stays
//             referenced by its store and hittable on the device until the
//             store lands, then joins the device's evictor as a cached block;
//             the resumed sequence finds its prefix on the device or the host
//             like any other request (promotion).
//   promotion (host -> device) commit() of a new sequence whose prefix names
//             host blocks allocates device blocks for them and loads them; the
//             sequence is loading (is_loading) until every load completed, and
//             the loaded blocks join the device prefix cache only then.
// The copies to start are taken with take_new_copies() for the next step.
//
// Lengths, per sequence: num_cached_tokens <= num_computed_tokens <= num_tokens
// <= num_allocated_blocks * block_size_tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <unordered_map>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/common/kv_copy.h"
#include "sluice/common/result.h"
#include "sluice/kv/block_hash.h"
#include "sluice/kv/block_pool.h"
#include "sluice/kv/eviction_policy.h"
#include "sluice/kv/host_tier.h"

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
  // Reuse-history policy (eviction_policy.h): one doubling of the requests
  // that ever used a block's key is worth reuse_seen_weight * num_blocks
  // releases (cache turnovers); one block of depth in the prefix chain costs
  // reuse_depth_weight_blocks releases. The counts live in a count-min sketch
  // of 4 rows x reuse_history_counters_per_block * num_blocks 16-bit counters
  // (rounded up to a power of two): 64 per block is ~0.5 KB per block, and
  // remembers about 64 cache-fulls of distinct keys.
  double reuse_seen_weight = 48.0;
  double reuse_depth_weight_blocks = 110.0;
  std::int32_t reuse_history_counters_per_block = 64;
  // The host tier: 0 blocks = none.
  std::int32_t num_host_blocks = 0;
  EvictionPolicy host_eviction = EvictionPolicy::kLru;
  // The host's reuse policies (host_tier.h): one doubling of the requests
  // that used a block's key is worth host_reuse_seen_weight * num_host_blocks
  // releases (host turnovers); one block of depth costs
  // host_reuse_depth_weight_blocks releases. Chosen on the Mooncake trace's
  // first half at its 512-token granularity (docs/benchmarks.md: flat from 0.75
  // to 1.5 and from 0 to 200). Adaptive reuse scales both by a factor learnt
  // against an LRU of both tiers' size, as on the device.
  double host_reuse_seen_weight = 1.0;
  double host_reuse_depth_weight_blocks = 50.0;
  HostAdmission host_admission;
  // Free device blocks demotion keeps ahead of allocation (about one step's
  // worth of new blocks): fewer, and allocation evicts keys the host never sees.
  std::int32_t demote_watermark_blocks = 0;
};

// The cached blocks that hold a prefix of some token sequence.
struct PrefixMatch {
  std::vector<BlockId> blocks;  // blocks[i] holds tokens [i*bs, (i+1)*bs)
  std::int32_t num_cached_tokens = 0;  // on the device: blocks.size() * bs
  // Host blocks holding the next keys after `blocks` (host_blocks[j]: tokens
  // [(blocks.size() + j) * bs, ...)). commit() loads those it is given; a
  // caller that prices recompute lower truncates them.
  std::vector<BlockId> host_blocks;
};

// The same as a count, without building the vector: what admission needs.
struct PrefixProbe {
  std::int32_t num_hit_blocks = 0;
  std::int32_t num_hit_free_blocks = 0;  // of those, currently cached free: taking them uses up available blocks
  std::int32_t num_host_hit_blocks = 0;  // after the device hit, in the host tier
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
  // Device tier.
  std::int64_t num_queried_tokens = 0;
  std::int64_t num_hit_tokens = 0;
  std::int64_t num_evicted_blocks = 0;
  std::int64_t num_queries_with_device_hits = 0;  // admissions whose prefix came partly from the device
  // Host tier: queried = what the device missed of each new prompt; hit = what was loaded.
  std::int64_t num_host_queried_tokens = 0;
  std::int64_t num_host_hit_tokens = 0;
  std::int64_t num_queries_with_host_hits = 0;
  std::int64_t num_host_loaded_blocks = 0;    // loads started
  std::int64_t num_host_stored_blocks = 0;    // stores completed
  std::int64_t num_host_evicted_blocks = 0;
  std::int64_t num_host_swapped_out_blocks = 0;  // stores started by swap_out()
  std::int64_t num_failed_copies = 0;
  // Device keys evicted without reaching the host: admission refused them, or
  // allocation could not wait for a demotion.
  std::int64_t num_demotions_skipped = 0;
  // Of those, the ones allocation evicted directly (demotion had not kept
  // enough free), split by what allocated: a new sequence's admission, or a
  // running one's next chunk or decode; and how many of either happened while
  // demotions were still in flight (the link was behind, not the watermark short).
  std::int64_t num_evicted_past_host_admitting = 0;
  std::int64_t num_evicted_past_host_growing = 0;
  std::int64_t num_evicted_past_host_while_demoting = 0;
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
  // Keys that left either tier: a probe is stale once this moves.
  std::int64_t num_evicted_blocks() const {
    return pool_.counters().num_evicted_blocks + (host_ ? host_->counters().num_evicted_blocks : 0);
  }
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
  bool has_host_tier() const { return host_.has_value(); }
  std::int32_t num_host_blocks() const { return host_ ? host_->num_blocks() : 0; }
  std::int32_t num_host_stored_blocks() const { return host_ ? host_->num_stored_blocks() : 0; }
  // The host's adaptive reuse: the learnt LRU counterfactual (nullptr otherwise).
  const LruCounterfactual* host_counterfactual() const { return host_counterfactual_ ? &*host_counterfactual_ : nullptr; }
  // A sequence waiting for loads; it must not run until they complete.
  bool is_loading(SequenceId seq_id) const;
  // A load of the sequence failed: its blocks do not hold its prefix.
  bool load_failed(SequenceId seq_id) const;
  std::int32_t num_copies_in_flight() const { return static_cast<std::int32_t>(copies_.size()); }
  // Device blocks that stores in flight will give back when they land: room
  // the planner can wait for instead of preempting for it.
  std::int32_t num_freeing_blocks() const { return num_demoting_blocks_ + num_swapping_blocks_; }

  // --- mutations ---------------------------------------------------------
  // Takes the prefix hit's blocks and enough new blocks; on failure (not
  // enough available) nothing changes.
  Status commit(const KvAllocation& allocation);
  // Registers the sequence's full blocks inside [0, num_computed_tokens) in
  // the prefix cache, so later requests can hit them (no-op without caching).
  void cache_computed_blocks(SequenceId seq_id, std::span<const BlockHash> block_hashes,
                             std::int32_t num_computed_tokens);
  // Releases every block of the sequence (preemption, finish, abort). Its
  // loads in flight keep their blocks until they complete.
  void free(SequenceId seq_id);
  // Preemption by swapping (the header's swap-out): stores the sequence's
  // registered blocks (keys block_hashes) that no other sequence holds and
  // the host lacks, then free(). Returns the stores started; a block the host
  // cannot take (every host block in a copy) is left to be recomputed.
  std::int32_t swap_out(SequenceId seq_id, std::span<const BlockHash> block_hashes);
  // Starts demotions until demote_watermark_blocks (or target_free_blocks)
  // are free or being freed (no-op without a host tier).
  void start_demotions() { start_demotions(config_.demote_watermark_blocks); }
  void start_demotions(std::int32_t target_free_blocks);
  // Whether num_new_blocks can be allocated now without evicting a cached
  // key directly (past the host tier), leaving demote_watermark_blocks free
  // for the steps after. If not, starts the demotions that will free them and
  // returns false while they are in flight: the caller waits for them, a step or so. True without a host
  // tier, and when nothing more can be demoted (allocation then evicts, or
  // commit fails, as it would have).
  bool make_room_below(std::int32_t num_new_blocks);
  // The copies started since the last call, for the next step's batch.
  std::vector<KvBlockCopy> take_new_copies() { return std::exchange(new_copies_, {}); }
  // A backend reported a copy done (ids it does not know are a bug).
  void complete_copy(const KvCopyCompletion& completion);

  void check_invariants() const;

 private:
  struct Sequence {
    std::vector<BlockId> blocks;
    std::int32_t num_registered_blocks = 0;  // blocks[0, n) are in the prefix cache or were offered to it
    std::int32_t num_prefix_hit_blocks = 0;  // blocks[0, n) came from the prefix hit (device or host) at admission
    std::uint64_t instance = 0;              // tells a re-admitted sequence from its earlier self
    std::int32_t num_loading_blocks = 0;
    bool load_failed = false;
    std::int32_t num_device_hit_blocks = 0;  // of those, from the device
    std::size_t num_keys_noted = 0;          // keys the pool's adaptive policy has seen (note_request)
  };
  struct Copy {
    KvCopyDirection direction = KvCopyDirection::kDeviceToHost;
    BlockId device_block = 0;
    BlockId host_block = 0;
    BlockHash hash = 0;
    SequenceId seq_id = 0;  // loads: who waits for it
    std::uint64_t instance = 0;
    // Stores: a swap-out's (the device block goes back to the evictor when it
    // lands, at this depth past its sequence's prefix hit) or a demotion's.
    bool swap = false;
    std::int32_t novel_depth_blocks = 0;
    std::int32_t depth_blocks = 0;
  };
  KvCopyId add_copy(const Copy& copy);
  // Whether the device pool caches a key: the host tier evicts such duplicates first.
  HostTier::OnDevice on_device() const;
  // Adaptive reuse on the host: its evictor follows the learnt scale in eighths.
  void follow_host_scale();
  void count_skipped_demotion(const BlockPool::Demotion& demotion);

  KvCacheConfig config_;
  BlockPool pool_;
  std::optional<HostTier> host_;
  // The host's adaptive reuse: an LRU of both tiers' size beside them (keys only).
  std::optional<LruCounterfactual> host_counterfactual_;
  std::unordered_map<SequenceId, Sequence> sequences_;
  std::unordered_map<KvCopyId, Copy> copies_;  // in flight
  std::vector<KvBlockCopy> new_copies_;        // not yet taken for a step
  KvCopyId next_copy_id_ = 1;
  std::uint64_t next_instance_ = 1;
  std::int32_t num_demoting_blocks_ = 0;
  std::int32_t num_swapping_blocks_ = 0;
  std::int64_t num_swapped_out_blocks_ = 0;
  std::int64_t num_queried_tokens_ = 0;
  std::int64_t num_hit_tokens_ = 0;
  std::int64_t num_queries_with_device_hits_ = 0;
  std::int64_t num_host_queried_tokens_ = 0;
  std::int64_t num_host_hit_tokens_ = 0;
  std::int64_t num_queries_with_host_hits_ = 0;
  std::int64_t num_failed_copies_ = 0;
  std::int64_t num_demotions_skipped_ = 0;
  std::int64_t num_evicted_past_host_admitting_ = 0;
  std::int64_t num_evicted_past_host_growing_ = 0;
  std::int64_t num_evicted_past_host_while_demoting_ = 0;
};

}  // namespace sluice
