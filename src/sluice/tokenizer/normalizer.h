// Normalizers: text -> text rewrites applied to each piece of input between
// added tokens, before pre-tokenization. Only the types real BPE tokenizers
// use; a Sequence is flattened into its steps at load.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sluice/tokenizer/js_regex.h"
#include "sluice/tokenizer/json_fields.h"

namespace sluice::tokenizer_detail {

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };

// A string-or-regex pattern ({"String": ...} or {"Regex": ...}).
struct Pattern {
  std::optional<std::string> literal;  // set for {"String": ...}
  std::optional<JsRegex> regex;        // set for {"Regex": ...}
  static Pattern from_json(const Json& value, std::string_view path);
  // Replaces every occurrence in `text` with `content` (JavaScript replaceAll,
  // where a regex replacement may use $$, $& and $1..$9).
  std::string replace_all(std::string_view text, std::string_view content) const;
};

struct UnicodeNormalization { UnicodeForm form; };
struct ReplaceNormalizer { Pattern pattern; std::string content; };
struct PrependNormalizer { std::string prepend; };
struct StripNormalizer { bool left; bool right; };
struct StripAccentsNormalizer {};
struct LowercaseNormalizer {};
// SentencePiece's nmt_nfkc charsmap, approximated exactly as the reference does.
struct PrecompiledNormalizer {};

using NormalizerStep = std::variant<UnicodeNormalization, ReplaceNormalizer, PrependNormalizer,
                                    StripNormalizer, StripAccentsNormalizer, LowercaseNormalizer,
                                    PrecompiledNormalizer>;

class Normalizer {
 public:
  // `value` is tokenizer.json's "normalizer" (may be null: no steps).
  static Normalizer from_json(const Json& value, std::string_view path);
  bool empty() const { return steps_.empty(); }
  // Applies every step to `text` in place.
  void apply(std::string& text) const;

 private:
  void add(const Json& value, std::string_view path);
  std::vector<NormalizerStep> steps_;
};

// Unicode normalization of UTF-8 text (ICU; JavaScript's String.prototype.normalize).
std::string unicode_normalize(std::string_view text, UnicodeForm form);

}  // namespace sluice::tokenizer_detail
