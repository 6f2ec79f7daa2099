// PairRankMap: (left symbol, right symbol) -> (merge rank, merged symbol), an
// open-addressing table because BPE does this lookup for every adjacent pair
// of every word: it must cost a multiply and a probe, not a string hash.
#pragma once

#include <cstdint>
#include <vector>

namespace sluice::tokenizer_detail {

struct Merge {
  std::int32_t rank = -1;    // position in the merges list (lower merges first)
  std::int32_t result = -1;  // symbol of the concatenation
};

class PairRankMap {
 public:
  void reserve(std::size_t num_pairs);
  // Later inserts of the same pair overwrite earlier ones (the reference builds
  // a Map from the merges list, so a duplicated merge gets its last rank).
  void insert(std::int32_t left, std::int32_t right, Merge merge);
  // rank == -1 when the pair does not merge.
  Merge find(std::int32_t left, std::int32_t right) const {
    if (left < 0 || right < 0 || slots_.empty()) return {};
    const std::uint64_t key = pack(left, right);
    for (std::size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return slot.merge;
      if (slot.key == kEmpty) return {};
    }
  }
  std::size_t size() const { return size_; }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  struct Slot {
    std::uint64_t key = kEmpty;
    Merge merge;
  };
  static std::uint64_t pack(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  std::size_t slot_of(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_) & mask_;
  }
  void rehash(std::size_t num_slots);

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace sluice::tokenizer_detail
