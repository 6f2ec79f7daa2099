// JsonConstraint: JSON mode (`response_format: {"type": "json_object"}`) and
// structured outputs (`{"type": "json_schema"}`) as a TokenConstraint. Tokens
// are allowed while their bytes keep the output a prefix of a JSON object (or
// of a document the schema accepts); once it is complete only end tokens
// (EOS, stop ids) are. The vocabulary trie is built once per model and shared.
#pragma once

#include <algorithm>
#include <memory>
#include <variant>
#include <vector>

#include "sluice/engine/token_constraint.h"
#include "sluice/structured/json_acceptor.h"
#include "sluice/structured/json_schema.h"
#include "sluice/structured/schema_acceptor.h"
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
// `Acceptor` is JsonAcceptor or SchemaAcceptor: a copyable byte-level state
// with feed(byte), is_complete() and in_plain_string(); the plain-string
// bitmask applies only where that says any string content may follow.
template <class Acceptor>
bool add_json_mask(const JsonVocabulary& vocabulary, const Acceptor& state, std::span<std::uint64_t> allowed_bits) {
  if (state.is_complete()) return false;
  bool any = false;
  const bool plain = state.in_plain_string();
  if (plain) {
    const std::span<const std::uint64_t> content = vocabulary.plain_string_bits();
    for (std::size_t w = 0; w < std::min(content.size(), allowed_bits.size()); ++w) {
      allowed_bits[w] |= content[w];
      any = any || content[w] != 0;
    }
  }
  const TokenTrie& trie = plain ? vocabulary.not_plain_string_tokens() : vocabulary.all_tokens();
  trie.walk(state, [&](std::uint32_t node, const Acceptor&) {
    for (TokenId t : trie.tokens_at(trie.nodes()[node])) {
      const auto id = static_cast<std::size_t>(t);
      if (id / 64 < allowed_bits.size()) allowed_bits[id / 64] |= std::uint64_t{1} << (id % 64);
      any = true;
    }
  });
  return any;
}

class JsonConstraint final : public TokenConstraint {
 public:
  // end_token_ids: what may end the output once the object is complete.
  JsonConstraint(std::shared_ptr<const JsonVocabulary> vocabulary, std::vector<TokenId> end_token_ids);
  // The output is one document valid against `schema`.
  JsonConstraint(std::shared_ptr<const JsonVocabulary> vocabulary, std::vector<TokenId> end_token_ids,
                 std::shared_ptr<const JsonSchema> schema);

  void fill_allowed(std::span<std::uint64_t> allowed_bits) override;
  Status accept(TokenId token) override;

  bool is_complete() const {
    return std::visit([](const auto& state) { return state.is_complete(); }, state_);
  }

 private:
  std::shared_ptr<const JsonVocabulary> vocabulary_;
  std::vector<TokenId> end_token_ids_;
  std::shared_ptr<const JsonSchema> schema_;  // what a SchemaAcceptor state borrows; null in JSON mode
  std::variant<JsonAcceptor, SchemaAcceptor> state_;
};

}  // namespace sluice::structured
