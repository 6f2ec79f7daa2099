// AdmissionWindow: how far past a request's prefix hit the prefix-aware
// policy keeps never-hit blocks warm, learnt online from ghosts (as ARC learns
// its split): the keys of the last num_blocks evicted blocks, each marked by
// the tier it left from. When a request's prefix stops at a block that was
// evicted from the cold tier, the window was too short and grows by a step;
// when it stops at one evicted from the warm tier, cold blocks took room the
// warm ones needed and it shrinks. Conversation traffic whose sessions resend
// all of their history drives it up; traffic with long one-off tails, down.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>

#include "sluice/kv/block_hash.h"

namespace sluice {

class AdmissionWindow {
 public:
  // All in blocks; capacity: how many ghosts are remembered.
  AdmissionWindow(std::int32_t initial_blocks, std::int32_t step_blocks, std::int32_t max_blocks,
                  std::int32_t capacity);

  std::int32_t blocks() const { return window_blocks_; }
  void on_evicted(BlockHash hash, bool from_cold_tier);
  // The first block a new request missed. Returns whether the window changed.
  bool on_first_miss(BlockHash hash);

  void check_invariants() const;

 private:
  struct Ghost {
    bool from_cold_tier = false;
    std::uint64_t stamp = 0;  // which fifo_ entry is the live one
  };
  void forget_oldest();

  std::int32_t window_blocks_;
  std::int32_t step_blocks_;
  std::int32_t max_blocks_;
  std::size_t capacity_;
  std::uint64_t next_stamp_ = 0;
  std::unordered_map<BlockHash, Ghost> ghosts_;
  std::deque<std::pair<BlockHash, std::uint64_t>> fifo_;  // oldest first; stale entries skipped
};

}  // namespace sluice
