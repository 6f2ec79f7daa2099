// BpeModel: tokenizer.json's "model" of type BPE. Encodes one pre-tokenized
// piece into ids with the reference's algorithm: repeatedly merge the adjacent
// pair with the lowest merge rank (leftmost first on ties).
//
// Every string the model can ever hold (vocabulary entries, added tokens, both
// sides and the result of every merge, single characters) is interned once at
// load as a "symbol" (an int), so encoding compares ints: pair lookups go to a
// flat hash table. Short words merge in place; long ones (a 1 MB piece with no
// spaces) use a linked list and a heap, so a piece costs O(n log n).
//
// Byte-level mode (a ByteLevel pre-tokenizer is present): the piece is raw
// bytes and each byte starts as the symbol of its GPT-2 code point. Otherwise
// each code point starts as its own symbol; one outside every string above is
// an "unknown" symbol that never merges and falls back to bytes or <unk>.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/tokenizer/json_fields.h"
#include "sluice/tokenizer/pair_rank_map.h"
#include "sluice/tokenizer/symbol_table.h"

namespace sluice::tokenizer_detail {

// Heterogeneous lookup: find(std::string_view) without building a std::string.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" (its "type" already checked to be BPE).
  static BpeModel from_json(const Json& model, std::string_view path, bool byte_level);

  // Makes `content` map to `id` (added tokens override the vocabulary, as in the reference).
  void add_token(const std::string& content, TokenId id);
  // Resolves the unk token and the <0xNN> byte-fallback ids; call after add_token()s.
  void finish_loading();

  // Appends the ids of one pre-tokenized piece (raw bytes in byte-level mode).
  void encode_piece(std::string_view piece, std::vector<TokenId>& out) const;

  std::optional<TokenId> find_token(std::string_view token) const;
  // (id, string) of every vocabulary entry, for building the id -> string table.
  template <class F>
  void for_each_vocab_entry(F&& f) const {
    for (const auto& [token, id] : vocab_) f(id, token);
  }
  std::optional<TokenId> unk_id() const { return unk_id_; }
  const std::string& unk_token() const { return unk_token_; }
  bool fuse_unk() const { return fuse_unk_; }
  bool byte_level() const { return byte_level_; }

 private:
  std::int32_t intern(std::string_view text);
  std::int32_t symbol_of_code_point(char32_t cp) const;
  // Appends the ids for a final symbol covering piece[begin, end).
  void emit(std::int32_t symbol, std::string_view piece, std::size_t begin, std::size_t end,
            std::vector<TokenId>& out) const;
  void merge_small(std::string_view piece, std::vector<TokenId>& out) const;
  void merge_large(std::string_view piece, std::vector<TokenId>& out) const;

  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::string unk_token_;
  std::optional<TokenId> unk_id_;

  std::vector<std::pair<std::string, TokenId>> vocab_;  // model.vocab as loaded
  SymbolTable symbols_;                    // string <-> symbol
  std::vector<TokenId> token_of_symbol_;   // symbol -> id, -1 if not a token
  PairRankMap merges_;
  std::array<std::int32_t, 256> byte_symbol_{};            // byte-level mode
  std::vector<std::int32_t> bmp_symbol_;                    // code point < 0x10000 -> symbol
  std::unordered_map<char32_t, std::int32_t> astral_symbol_;  // other code points
  std::array<TokenId, 256> byte_fallback_id_{};             // <0xNN>, -1 if absent
};

}  // namespace sluice::tokenizer_detail
