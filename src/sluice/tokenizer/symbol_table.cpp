#include "sluice/tokenizer/symbol_table.h"

#include <xxhash.h>

#include <bit>

namespace sluice::tokenizer_detail {

std::uint64_t SymbolTable::hash_of(std::string_view text) { return XXH3_64bits(text.data(), text.size()); }

void SymbolTable::reserve(std::size_t num_strings) {
  texts_.reserve(num_strings);
  const std::size_t wanted = std::bit_ceil(num_strings * 2 + 16);  // load factor <= 1/2
  if (wanted > slots_.size()) rehash(wanted);
}

void SymbolTable::rehash(std::size_t num_slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(num_slots, Slot{});
  mask_ = num_slots - 1;
  for (const Slot& slot : old) {
    if (slot.symbol < 0) continue;
    std::size_t i = slot.hash & mask_;
    while (slots_[i].symbol >= 0) i = (i + 1) & mask_;
    slots_[i] = slot;
  }
}

std::int32_t SymbolTable::find(std::string_view text) const {
  if (slots_.empty()) return -1;
  const std::uint64_t hash = hash_of(text);
  for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.symbol < 0) return -1;
    if (slot.hash == hash && texts_[static_cast<std::size_t>(slot.symbol)] == text) return slot.symbol;
  }
}

std::int32_t SymbolTable::intern(std::string_view text) {
  if ((texts_.size() + 1) * 2 > slots_.size()) rehash(std::bit_ceil((texts_.size() + 1) * 4 + 16));
  const std::uint64_t hash = hash_of(text);
  std::size_t i = hash & mask_;
  for (;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.symbol < 0) break;
    if (slot.hash == hash && texts_[static_cast<std::size_t>(slot.symbol)] == text) return slot.symbol;
  }
  const auto symbol = static_cast<std::int32_t>(texts_.size());
  texts_.emplace_back(text);
  slots_[i] = Slot{hash, symbol};
  return symbol;
}

}  // namespace sluice::tokenizer_detail
