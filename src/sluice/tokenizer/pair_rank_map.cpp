#include "sluice/tokenizer/pair_rank_map.h"

#include <bit>

namespace sluice::tokenizer_detail {

void PairRankMap::reserve(std::size_t num_pairs) {
  const std::size_t wanted = std::bit_ceil(num_pairs * 2 + 16);  // load factor <= 1/2
  if (wanted > slots_.size()) rehash(wanted);
}

void PairRankMap::rehash(std::size_t num_slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(num_slots, Slot{});
  mask_ = num_slots - 1;
  shift_ = 64 - std::countr_zero(num_slots);
  size_ = 0;
  for (const Slot& slot : old) {
    if (slot.key != kEmpty) {
      insert(static_cast<std::int32_t>(slot.key >> 32), static_cast<std::int32_t>(slot.key & 0xFFFFFFFFu),
             slot.merge);
    }
  }
}

void PairRankMap::insert(std::int32_t left, std::int32_t right, Merge merge) {
  if ((size_ + 1) * 2 > slots_.size()) rehash(std::bit_ceil((size_ + 1) * 4 + 16));
  const std::uint64_t key = pack(left, right);
  for (std::size_t i = slot_of(key);; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.key == key) {
      slot.merge = merge;
      return;
    }
    if (slot.key == kEmpty) {
      slot.key = key;
      slot.merge = merge;
      ++size_;
      return;
    }
  }
}

}  // namespace sluice::tokenizer_detail
