// Which free-but-cached KV block is evicted first. Shared by the KV manager and
// the engine's configuration.
#pragma once

namespace sluice {

enum class EvictionPolicy {
  kLru,   // least recently freed first
  // Segmented LRU: a block that was hit at least once (reused by another
  // request) is freed into a protected segment that is evicted only after the
  // probation segment is empty, so one long cold prompt cannot flush hot prefixes.
  kSlru,
};

}  // namespace sluice
