// Evictor: the order in which free-but-cached blocks are given up. Only blocks
// nobody references are here; a prefix hit takes a block back out (remove()).
// Two intrusive doubly-linked lists over arrays indexed by BlockId make every
// operation O(1), which the scheduler's 50 us step budget needs.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/kv/eviction_policy.h"

namespace sluice {

class Evictor {
 public:
  // protected_capacity_blocks: how many blocks the SLRU protected segment may
  // hold; its oldest block is demoted to probation beyond that. Unused by LRU.
  Evictor(EvictionPolicy policy, std::int32_t num_blocks, std::int32_t protected_capacity_blocks);

  // A block became free. was_hit: it served a prefix hit while cached, which
  // under SLRU earns it the protected segment.
  void insert(BlockId block, bool was_hit);
  void remove(BlockId block);
  // The next block to evict, taken out; nullopt when empty.
  std::optional<BlockId> pop_victim();

  bool contains(BlockId block) const { return segment_[static_cast<std::size_t>(block)] != Segment::kNone; }
  std::int32_t size() const { return probation_.size + protected_.size; }
  std::int32_t num_protected() const { return protected_.size; }

  void check_invariants() const;

 private:
  enum class Segment : std::uint8_t { kNone, kProbation, kProtected };
  struct List {  // head = oldest (next victim), tail = newest
    BlockId head = -1;
    BlockId tail = -1;
    std::int32_t size = 0;
  };
  List& list_of(Segment segment) { return segment == Segment::kProtected ? protected_ : probation_; }
  void push_back(Segment segment, BlockId block);
  void unlink(BlockId block);

  EvictionPolicy policy_;
  std::int32_t protected_capacity_blocks_;
  std::vector<BlockId> prev_;  // [num_blocks]
  std::vector<BlockId> next_;  // [num_blocks]
  std::vector<Segment> segment_;  // [num_blocks]
  List probation_;
  List protected_;
};

}  // namespace sluice
