// ReuseHistory: how many requests have used each block key, over a history
// far longer than the cache (on the Mooncake trace a reused block's first
// reuse comes a median 5.6M tokens later, eight times a 0.7M-token cache, so
// counts kept only while a block is cached never see it). A count-min sketch
// (Cormode & Muthukrishnan): rows of saturating counters indexed by
// independent hashes of the key; a key's count is the minimum over its rows,
// never below the truth and above it only by collisions. Updates are
// conservative (only the rows at the minimum grow), which keeps the
// overestimate small. Fixed memory, O(rows) per operation.
#pragma once

#include <cstdint>
#include <vector>

#include "sluice/kv/block_hash.h"

namespace sluice {

class ReuseHistory {
 public:
  // counters_per_row: rounded up to a power of two, at least 64.
  explicit ReuseHistory(std::int64_t counters_per_row);

  // A request used the key (computed it or hit it).
  void record(BlockHash hash);
  // How many requests used the key (>= the truth; 0 for a key never recorded,
  // barring collisions).
  std::int32_t count(BlockHash hash) const;
  std::int64_t memory_bytes() const { return static_cast<std::int64_t>(counters_.size() * sizeof(Counter)); }

 private:
  using Counter = std::uint16_t;
  static constexpr int kRows = 4;
  std::size_t slot(int row, BlockHash hash) const;

  std::uint64_t mask_;
  std::vector<Counter> counters_;  // [kRows][mask_ + 1]
};

}  // namespace sluice
