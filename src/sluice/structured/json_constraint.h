// JsonConstraint: JSON mode (`response_format: {"type": "json_object"}`) as a
// TokenConstraint. Tokens are allowed while their bytes keep the output a
// prefix of a JSON object; once the object closes only end tokens (EOS, stop
// ids) are. The vocabulary trie is built once per model and shared.
#pragma once

#include <memory>
#include <vector>

#include "sluice/engine/token_constraint.h"
#include "sluice/structured/json_acceptor.h"
#include "sluice/structured/token_trie.h"
#include "sluice/tokenizer/tokenizer.h"

namespace sluice::structured {

// The model's vocabulary indexed for JSON mode. Built once per model (a few
// hundred ms for 128k tokens), then shared read-only by every request.
//
// Inside a string most of the vocabulary is allowed, and walking the whole
// trie there costs ~13 ms a token; so tokens that are plain string content
// (whole UTF-8, no quote, backslash or control byte) are one precomputed
// bitmask, and only the rest are walked.
class JsonVocabulary {
 public:
  // token_bytes[id]: see TokenTrie.
  explicit JsonVocabulary(std::span<const std::optional<std::string>> token_bytes);

  const TokenTrie& all_tokens() const { return all_tokens_; }
  const TokenTrie& not_plain_string_tokens() const { return not_plain_string_tokens_; }
  std::span<const std::uint64_t> plain_string_bits() const { return plain_string_bits_; }

 private:
  std::vector<std::uint64_t> plain_string_bits_;  // first: the other two are built from it
  TokenTrie all_tokens_;
  TokenTrie not_plain_string_tokens_;
};

// Every id below `model_vocab_size` with the bytes the tokenizer would emit
// for it mid-text; special tokens and ids the tokenizer lacks are never allowed.
std::shared_ptr<const JsonVocabulary> make_json_vocabulary(const Tokenizer& tokenizer,
                                                           std::int32_t model_vocab_size);

// Sets the bits of every token that may follow `state`; false if none may
// (the document is complete, or the vocabulary has no way forward).
bool add_json_mask(const JsonVocabulary& vocabulary, const JsonAcceptor& state, std::span<std::uint64_t> allowed_bits);

class JsonConstraint final : public TokenConstraint {
 public:
  // end_token_ids: what may end the output once the object is complete.
  JsonConstraint(std::shared_ptr<const JsonVocabulary> vocabulary, std::vector<TokenId> end_token_ids);

  void fill_allowed(std::span<std::uint64_t> allowed_bits) override;
  Status accept(TokenId token) override;

  bool is_complete() const { return state_.is_complete(); }

 private:
  std::shared_ptr<const JsonVocabulary> vocabulary_;
  std::vector<TokenId> end_token_ids_;
  JsonAcceptor state_;
};

}  // namespace sluice::structured
