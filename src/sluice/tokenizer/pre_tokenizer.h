// Pre-tokenizers: split normalized text into pieces that BPE encodes
// independently. Behaviour follows the reference (transformers.js), including
// its simplifications: a Split that is not inverted isolates its matches for
// every `behavior` except "Removed"; a Sequence applies each step to every
// piece the previous step produced (flattened here into a list of steps).
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sluice/tokenizer/function_ref.h"
#include "sluice/tokenizer/js_regex.h"
#include "sluice/tokenizer/json_fields.h"

namespace sluice::tokenizer_detail {

enum class SplitMode {
  kIsolate,     // matches and the text between them are pieces
  kRemove,      // only the text between matches (and captured groups) are pieces
  kMatchesOnly  // only the matches are pieces (Split with invert, Digits, ...)
};

struct RegexSplit {
  JsRegex regex;
  SplitMode mode = SplitMode::kIsolate;
};

// Byte-level step: the model sees each piece as raw bytes. Must be the last step.
struct ByteLevelStep {
  bool add_prefix_space = false;
  std::optional<JsRegex> gpt2_split;  // set when use_regex
};

struct MetaspaceStep {
  std::string replacement;  // "▁"
  std::string str_rep;
  bool add_prefix_space = false;
  enum class Prepend { kAlways, kFirst, kNever } prepend_scheme = Prepend::kAlways;
};

using PreTokenizerStep = std::variant<RegexSplit, ByteLevelStep, MetaspaceStep>;

class PreTokenizer {
 public:
  // `value` is tokenizer.json's "pre_tokenizer" (may be null: the text is one piece).
  static PreTokenizer from_json(const Json& value, std::string_view path);

  // Calls on_piece for every piece of `text` in order. `section_index` is the
  // index of this text among the added-token split of the input (Metaspace's
  // "first" scheme only prefixes section 0).
  void run(std::string_view text, int section_index,
           FunctionRef<void(std::string_view)> on_piece) const;

  // True when a ByteLevel step is present: pieces are to be mapped byte by byte.
  bool byte_level() const { return byte_level_; }

 private:
  void add(const Json& value, std::string_view path);
  void run_from(std::size_t step_index, std::string_view text, int section_index,
                FunctionRef<void(std::string_view)> on_piece) const;
  std::vector<PreTokenizerStep> steps_;
  bool byte_level_ = false;
};

}  // namespace sluice::tokenizer_detail
