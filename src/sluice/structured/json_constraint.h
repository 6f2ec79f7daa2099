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

// The model's vocabulary for constrained decoding: every id below
// `model_vocab_size` with the bytes the tokenizer would emit for it mid-text;
// special tokens and ids the tokenizer lacks are never allowed.
std::shared_ptr<const TokenTrie> make_token_trie(const Tokenizer& tokenizer, std::int32_t model_vocab_size);

class JsonConstraint final : public TokenConstraint {
 public:
  // end_token_ids: what may end the output once the object is complete.
  JsonConstraint(std::shared_ptr<const TokenTrie> trie, std::vector<TokenId> end_token_ids);

  void fill_allowed(std::span<std::uint64_t> allowed_bits) override;
  Status accept(TokenId token) override;

  bool is_complete() const { return state_.is_complete(); }

 private:
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<TokenId> end_token_ids_;
  JsonAcceptor state_;
};

}  // namespace sluice::structured
