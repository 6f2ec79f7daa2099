// Which free-but-cached KV block is evicted first. Shared by the KV manager and
// the engine's configuration.
#pragma once

#include <cstdint>

namespace sluice {

enum class EvictionPolicy {
  kLru,   // least recently freed first
  // Segmented LRU: a block that was hit at least once (reused by another
  // request) is freed into a protected segment that is evicted only after the
  // probation segment is empty, so one long cold prompt cannot flush hot prefixes.
  kSlru,
  // Prefix-aware: a freed block is ranked by recency (a clock of releases),
  // reuse (log2 of its hits, aged by that clock: a hit is worth a fixed number
  // of releases, so old popularity fades) and depth in the prefix chain (a
  // deep block is worthless without its ancestors, so it goes before them).
  // Never-hit blocks further than an admission window past the request's
  // prefix hit form a cold tier that is evicted first: on the Mooncake trace
  // a session's next turn mostly reuses the start of what the last turn
  // added, rarely all of it. The window is learnt online (admission_window.h),
  // since agent sessions that resend their whole history need a long one.
  // Results: docs/benchmarks.md.
  kPrefixAware,
  // Reuse history: a freed block is ranked by recency (the same clock of
  // releases), how many requests ever used its key (log2 of a count kept far
  // longer than the block stays cached: reuse_history.h), and its depth in
  // the prefix chain. No cold tier: a block's count, not its novelty, says
  // whether it comes back. Results: docs/benchmarks.md.
  kReuseHistory,
  // Adaptive reuse: reuse history whose count and depth terms are scaled by
  // a factor in [0, 1] learnt online against LRU (lru_counterfactual.h: a
  // shadow LRU of the same size beside the cache, keys only): a request that
  // hits more than the shadow raises it, one that hits less lowers it. At 0
  // it is LRU. On traffic whose sessions end (agent sessions) the counts keep
  // dead sessions' blocks and the factor falls; where long-lived popular
  // prefixes recur (the Mooncake trace) it stays up. Results: docs/benchmarks.md.
  kAdaptiveReuse,
};

// What the ranked policies (prefix-aware, reuse history) know about a block
// when it is freed.
struct EvictionSignals {
  std::int32_t num_hits = 0;  // prefix hits it served since it was cached
  // Blocks between this one and the end of the prefix hit its last owner
  // started from: 0 for a hit block or the first new block.
  std::int32_t novel_depth_blocks = 0;
  // Requests that ever used its key, this one included (the reuse-history
  // policy; 0 when the pool keeps no history).
  std::int32_t times_seen = 0;
  // Its position in the prefix chain: 0 for a prompt's first block.
  std::int32_t depth_blocks = 0;
};

// Which blocks the device pool gives up deserve host space (per-tier
// admission). On conversation traffic most blocks are never reused; a block
// deep past its request's prefix hit rarely is (see kPrefixAware).
struct HostAdmission {
  // Prefix hits a block must have served on the device (0: every block).
  std::int32_t min_hits = 0;
  // Never-hit blocks further than this past their request's prefix hit are
  // not stored (negative: no limit).
  std::int32_t max_novel_depth_blocks = -1;

  bool admits(const EvictionSignals& signals) const {
    if (signals.num_hits < min_hits) return false;
    return signals.num_hits > 0 || max_novel_depth_blocks < 0 || signals.novel_depth_blocks <= max_novel_depth_blocks;
  }
};

}  // namespace sluice
