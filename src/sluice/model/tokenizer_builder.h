// Builds the small byte-level BPE tokenizer that `sluice make-model` ships with
// random-weight models: GPT-2 byte mapping, the Llama 3 split regex, merges
// learned deterministically from a built-in text, Llama 3 style special tokens.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/common/result.h"

namespace sluice {

struct BuiltTokenizer {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  std::int32_t num_tokens = 0;  // ids [0, num_tokens): the whole vocabulary asked for
  // Ids from here up are filler words that encoding never produces (the
  // built-in text teaches only a few hundred merges).
  std::int32_t first_filler_token_id = 0;
  std::int32_t bos_token_id = 0;
  std::int32_t eos_token_id = 0;          // <|end_of_text|>
  std::int32_t end_of_turn_token_id = 0;  // <|eot_id|>
};

// The smallest vocabulary that holds the 256 byte tokens and the special tokens.
std::int32_t min_builtin_vocab_size();

// Uses at most max_tokens ids.
Result<BuiltTokenizer> build_byte_level_tokenizer(std::int32_t max_tokens);

}  // namespace sluice
