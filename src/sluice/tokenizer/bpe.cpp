#include "sluice/tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <queue>

#include <fmt/format.h>

#include "sluice/tokenizer/byte_level.h"
#include "sluice/tokenizer/utf8.h"

namespace sluice::tokenizer_detail {
namespace {

// Pieces up to this many units merge by rescanning a flat array (cheap for
// words); longer ones use the heap.
constexpr std::size_t kMaxUnitsForFlatMerge = 64;

}  // namespace

BpeModel BpeModel::from_json(const Json& model, std::string_view path, bool byte_level) {
  BpeModel bpe;
  bpe.byte_level_ = byte_level;
  bpe.byte_fallback_ = bool_or(model, "byte_fallback", false, path);
  bpe.fuse_unk_ = bool_or(model, "fuse_unk", false, path);
  bpe.ignore_merges_ = bool_or(model, "ignore_merges", false, path);
  bpe.unk_token_ = string_or(model, "unk_token", "", path);
  if (!string_or(model, "end_of_word_suffix", "", path).empty()) {
    throw_load_error(join_path(path, "end_of_word_suffix"), "unsupported (no target tokenizer uses it)");
  }
  if (!string_or(model, "continuing_subword_suffix", "", path).empty()) {
    throw_load_error(join_path(path, "continuing_subword_suffix"), "unsupported");
  }
  if (const Json* dropout = optional_field(model, "dropout"); dropout != nullptr && dropout->is_number() &&
                                                              dropout->get<double>() > 0.0) {
    throw_load_error(join_path(path, "dropout"), "BPE dropout is not supported for inference");
  }

  const std::string vocab_path = join_path(path, "vocab");
  const Json& vocab = required_field(model, "vocab", path);
  if (!vocab.is_object()) {
    throw_load_error(vocab_path, fmt::format("expected an object of token -> id, got {}", json_type_name(vocab)));
  }
  const std::string merges_path = join_path(path, "merges");
  const Json* merges_json = optional_field(model, "merges");
  const Json empty_merges = Json::array();
  const Json& merges = merges_json == nullptr ? empty_merges : expect_array(*merges_json, merges_path);

  bpe.symbols_.reserve(vocab.size() + merges.size() + 512);
  bpe.token_of_symbol_.reserve(vocab.size() + merges.size() + 512);
  bpe.vocab_.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    // Paths are formatted only on error: this loop runs for every vocabulary entry.
    if (!id_json.is_number_integer()) expect_int(id_json, fmt::format("{}[\"{}\"]", vocab_path, token));
    const auto id = id_json.get<std::int64_t>();
    if (id < 0 || id > INT32_MAX - 1) {
      throw_load_error(fmt::format("{}[\"{}\"]", vocab_path, token), fmt::format("id {} out of range", id));
    }
    bpe.vocab_.emplace_back(token, static_cast<TokenId>(id));
    const std::int32_t symbol = bpe.intern(token);
    bpe.token_of_symbol_[static_cast<std::size_t>(symbol)] = static_cast<TokenId>(id);
  }

  // Merges are "a b" strings (tokenizers < 0.20) or ["a", "b"] pairs; the
  // format is decided by the first entry, as in the reference.
  const bool pair_format = !merges.empty() && merges[0].is_array();
  bpe.merges_.reserve(merges.size());
  std::string merged;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& entry = merges[rank];
    std::string_view left;
    std::string_view right;
    if (pair_format) {
      if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_string()) {
        throw_load_error(fmt::format("{}[{}]", merges_path, rank),
                         fmt::format("expected a pair of strings [left, right], got {}", entry.dump()));
      }
      left = entry[0].get_ref<const std::string&>();
      right = entry[1].get_ref<const std::string&>();
    } else {
      if (!entry.is_string()) expect_string(entry, fmt::format("{}[{}]", merges_path, rank));
      const std::string& text = entry.get_ref<const std::string&>();
      // JavaScript text.split(" ", 2).
      const std::size_t space = text.find(' ');
      if (space == std::string::npos) {
        throw_load_error(fmt::format("{}[{}]", merges_path, rank), fmt::format("merge \"{}\" has no space", text));
      }
      left = std::string_view(text).substr(0, space);
      const std::size_t right_end = text.find(' ', space + 1);
      right = std::string_view(text).substr(space + 1, right_end == std::string::npos
                                                           ? std::string::npos
                                                           : right_end - space - 1);
    }
    merged.assign(left);
    merged.append(right);
    const std::int32_t left_symbol = bpe.intern(left);
    const std::int32_t right_symbol = bpe.intern(right);
    const std::int32_t result_symbol = bpe.intern(merged);
    bpe.merges_.insert(left_symbol, right_symbol,
                       Merge{static_cast<std::int32_t>(rank), result_symbol});
  }

  if (byte_level) {
    const ByteLevelMap& map = ByteLevelMap::get();
    for (std::size_t b = 0; b < 256; ++b) bpe.byte_symbol_[b] = bpe.intern(map.utf8_of_byte[b]);
  }
  return bpe;
}

std::int32_t BpeModel::intern(std::string_view text) {
  const std::int32_t symbol = symbols_.intern(text);
  if (static_cast<std::size_t>(symbol) == token_of_symbol_.size()) token_of_symbol_.push_back(-1);
  return symbol;
}

void BpeModel::add_token(const std::string& content, TokenId id) {
  const std::int32_t symbol = intern(content);
  token_of_symbol_[static_cast<std::size_t>(symbol)] = id;
}

void BpeModel::finish_loading() {
  if (!unk_token_.empty()) {
    if (const auto id = find_token(unk_token_)) unk_id_ = *id;
  }
  for (std::size_t b = 0; b < 256; ++b) {
    const auto id = find_token(fmt::format("<0x{:02X}>", b));
    byte_fallback_id_[b] = id ? *id : -1;
  }
  if (!byte_level_) {
    // Symbols that are exactly one code point: the starting symbols of char mode.
    bmp_symbol_.assign(0x10000, -1);
    for (std::int32_t symbol = 0; symbol < static_cast<std::int32_t>(symbols_.size()); ++symbol) {
      const std::string& text = symbols_.text(symbol);
      std::size_t pos = 0;
      if (text.empty()) continue;
      const char32_t cp = next_code_point(text, pos);
      if (pos != text.size()) continue;
      if (cp < 0x10000) {
        bmp_symbol_[cp] = symbol;
      } else {
        astral_symbol_[cp] = symbol;
      }
    }
  }
}

std::int32_t BpeModel::symbol_of_code_point(char32_t cp) const {
  if (cp < 0x10000) return bmp_symbol_[cp];
  const auto it = astral_symbol_.find(cp);
  return it == astral_symbol_.end() ? -1 : it->second;
}

std::optional<TokenId> BpeModel::find_token(std::string_view token) const {
  const std::int32_t symbol = symbols_.find(token);
  if (symbol < 0) return std::nullopt;
  const TokenId id = token_of_symbol_[static_cast<std::size_t>(symbol)];
  if (id < 0) return std::nullopt;
  return id;
}

void BpeModel::emit(std::int32_t symbol, std::string_view piece, std::size_t begin, std::size_t end,
                    std::vector<TokenId>& out) const {
  if (symbol >= 0) {
    const TokenId id = token_of_symbol_[static_cast<std::size_t>(symbol)];
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (byte_fallback_) {
    // The reference falls back on the UTF-8 of the token string (the
    // byte-level form in byte-level mode) if every <0xNN> exists.
    std::string text;
    if (byte_level_) {
      ByteLevelMap::get().append_encoded(piece.substr(begin, end - begin), text);
    } else {
      text.assign(piece.substr(begin, end - begin));
    }
    const bool all_present = std::all_of(text.begin(), text.end(), [&](char c) {
      return byte_fallback_id_[static_cast<unsigned char>(c)] >= 0;
    });
    if (all_present) {
      for (const char c : text) out.push_back(byte_fallback_id_[static_cast<unsigned char>(c)]);
      return;
    }
  }
  // Without an unk token the reference yields no usable id; we drop the piece.
  if (unk_id_) out.push_back(*unk_id_);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    // A piece that is a whole token skips merging.
    std::optional<TokenId> whole;
    if (byte_level_) {
      thread_local std::string mapped;
      mapped.clear();
      ByteLevelMap::get().append_encoded(piece, mapped);
      whole = find_token(mapped);
    } else {
      whole = find_token(piece);
    }
    if (whole) {
      out.push_back(*whole);
      return;
    }
  }
  const std::size_t num_units = byte_level_ ? piece.size() : [&] {
    std::size_t n = 0;
    for (const char c : piece) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  }();
  if (num_units <= kMaxUnitsForFlatMerge) {
    merge_small(piece, out);
  } else {
    merge_large(piece, out);
  }
}

void BpeModel::merge_small(std::string_view piece, std::vector<TokenId>& out) const {
  thread_local std::vector<std::int32_t> symbol;
  thread_local std::vector<std::uint32_t> begin;  // begin.size() == symbol.size() + 1
  thread_local std::vector<Merge> pair;           // merge of (i, i+1)
  symbol.clear();
  begin.clear();
  if (byte_level_) {
    for (std::size_t i = 0; i < piece.size(); ++i) {
      symbol.push_back(byte_symbol_[static_cast<unsigned char>(piece[i])]);
      begin.push_back(static_cast<std::uint32_t>(i));
    }
  } else {
    std::size_t pos = 0;
    while (pos < piece.size()) {
      begin.push_back(static_cast<std::uint32_t>(pos));
      symbol.push_back(symbol_of_code_point(next_code_point(piece, pos)));
    }
  }
  begin.push_back(static_cast<std::uint32_t>(piece.size()));

  pair.clear();
  for (std::size_t i = 0; i + 1 < symbol.size(); ++i) pair.push_back(merges_.find(symbol[i], symbol[i + 1]));
  while (!pair.empty()) {
    std::size_t best = pair.size();
    std::int32_t best_rank = INT32_MAX;
    for (std::size_t i = 0; i < pair.size(); ++i) {
      if (pair[i].rank >= 0 && pair[i].rank < best_rank) {
        best_rank = pair[i].rank;
        best = i;
      }
    }
    if (best == pair.size()) break;
    symbol[best] = pair[best].result;
    symbol.erase(symbol.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    begin.erase(begin.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    pair.erase(pair.begin() + static_cast<std::ptrdiff_t>(best));
    if (best > 0) pair[best - 1] = merges_.find(symbol[best - 1], symbol[best]);
    if (best < pair.size()) pair[best] = merges_.find(symbol[best], symbol[best + 1]);
  }
  for (std::size_t i = 0; i < symbol.size(); ++i) emit(symbol[i], piece, begin[i], begin[i + 1], out);
}

void BpeModel::merge_large(std::string_view piece, std::vector<TokenId>& out) const {
  // Nodes are the starting units; a merge keeps the left node (so a node's
  // index is the position of its first unit: the tie-breaker) and unlinks
  // the right one.
  std::vector<std::int32_t> symbol;
  std::vector<std::uint32_t> begin;
  if (byte_level_) {
    symbol.reserve(piece.size());
    for (std::size_t i = 0; i < piece.size(); ++i) {
      symbol.push_back(byte_symbol_[static_cast<unsigned char>(piece[i])]);
      begin.push_back(static_cast<std::uint32_t>(i));
    }
  } else {
    std::size_t pos = 0;
    while (pos < piece.size()) {
      begin.push_back(static_cast<std::uint32_t>(pos));
      symbol.push_back(symbol_of_code_point(next_code_point(piece, pos)));
    }
  }
  const auto n = static_cast<std::int32_t>(symbol.size());
  std::vector<std::int32_t> next(static_cast<std::size_t>(n));
  std::vector<std::int32_t> prev(static_cast<std::size_t>(n));
  std::vector<std::uint32_t> end(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) {
    next[static_cast<std::size_t>(i)] = i + 1 < n ? i + 1 : -1;
    prev[static_cast<std::size_t>(i)] = i - 1;
    end[static_cast<std::size_t>(i)] =
        i + 1 < n ? begin[static_cast<std::size_t>(i) + 1] : static_cast<std::uint32_t>(piece.size());
  }

  struct Candidate {
    std::int32_t rank;
    std::int32_t left;
    std::int32_t right;
    std::int32_t left_symbol;
    std::int32_t right_symbol;
    std::int32_t result;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](std::int32_t left) {
    if (left < 0) return;
    const std::int32_t right = next[static_cast<std::size_t>(left)];
    if (right < 0) return;
    const std::int32_t ls = symbol[static_cast<std::size_t>(left)];
    const std::int32_t rs = symbol[static_cast<std::size_t>(right)];
    const Merge merge = merges_.find(ls, rs);
    if (merge.rank >= 0) heap.push(Candidate{merge.rank, left, right, ls, rs, merge.result});
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) consider(i);

  std::vector<bool> alive(static_cast<std::size_t>(n), true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const auto l = static_cast<std::size_t>(c.left);
    const auto r = static_cast<std::size_t>(c.right);
    // Stale if either side changed since the candidate was pushed.
    if (!alive[l] || !alive[r] || next[l] != c.right || symbol[l] != c.left_symbol ||
        symbol[r] != c.right_symbol) {
      continue;
    }
    symbol[l] = c.result;
    end[l] = end[r];
    alive[r] = false;
    next[l] = next[r];
    if (next[r] >= 0) prev[static_cast<std::size_t>(next[r])] = c.left;
    consider(prev[l]);
    consider(c.left);
  }
  for (std::int32_t i = 0; i >= 0 && i < n; i = next[static_cast<std::size_t>(i)]) {
    emit(symbol[static_cast<std::size_t>(i)], piece, begin[static_cast<std::size_t>(i)],
         end[static_cast<std::size_t>(i)], out);
  }
}

}  // namespace sluice::tokenizer_detail
