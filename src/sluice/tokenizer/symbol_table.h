// SymbolTable: interned strings <-> dense ints ("symbols"). An open-addressing
// table of (hash, symbol) over a vector of the strings: loading a tokenizer
// interns ~1M strings (vocabulary, both sides of every merge and its result),
// and a node-based map spends most of that time in cache misses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tokenizer_detail {

class SymbolTable {
 public:
  void reserve(std::size_t num_strings);
  // The symbol of `text`, adding it if new.
  std::int32_t intern(std::string_view text);
  // -1 if `text` was never interned.
  std::int32_t find(std::string_view text) const;
  const std::string& text(std::int32_t symbol) const { return texts_[static_cast<std::size_t>(symbol)]; }
  std::size_t size() const { return texts_.size(); }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    std::int32_t symbol = -1;  // -1: empty
  };
  static std::uint64_t hash_of(std::string_view text);
  void rehash(std::size_t num_slots);

  std::vector<std::string> texts_;  // [symbol]
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
};

}  // namespace sluice::tokenizer_detail
