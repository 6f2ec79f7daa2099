// The loaded tokenizer behind the Tokenizer handle: every stage of the
// pipeline plus the id <-> string tables. Immutable after load.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sluice/tokenizer/added_tokens.h"
#include "sluice/tokenizer/bpe.h"
#include "sluice/tokenizer/decoder.h"
#include "sluice/tokenizer/normalizer.h"
#include "sluice/tokenizer/post_processor.h"
#include "sluice/tokenizer/pre_tokenizer.h"

namespace sluice::tokenizer_detail {

struct Model {
  // encode: split off added tokens -> normalize -> pre-tokenize -> BPE -> template.
  std::vector<AddedToken> added_tokens;
  AddedTokenSplitter splitter;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel bpe;
  SpecialTokenTemplate special_template;
  // decode: id -> string -> decoder chain.
  Decoder decoder;
  std::vector<std::optional<std::string>> token_of_id;  // [vocab_size]; nullopt for holes
  StringSet added_contents;    // every added token's text
  StringSet special_contents;  // special added tokens + additional_special_tokens

  std::string bos_token;
  std::string eos_token;
  std::optional<TokenId> bos_id;
  std::optional<TokenId> eos_id;
  std::string chat_template;
};

}  // namespace sluice::tokenizer_detail
