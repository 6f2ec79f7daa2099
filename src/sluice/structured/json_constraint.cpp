#include "sluice/structured/json_constraint.h"

#include <algorithm>

#include <fmt/format.h>

#include "sluice/common/check.h"

namespace sluice::structured {
namespace {

void allow(std::span<std::uint64_t> bits, TokenId token) {
  const auto t = static_cast<std::size_t>(token);
  if (t / 64 < bits.size()) bits[t / 64] |= std::uint64_t{1} << (t % 64);
}

}  // namespace

std::shared_ptr<const TokenTrie> make_token_trie(const Tokenizer& tokenizer, std::int32_t model_vocab_size) {
  std::vector<std::optional<std::string>> bytes(static_cast<std::size_t>(model_vocab_size));
  for (TokenId id = 0; id < model_vocab_size; ++id) {
    if (tokenizer.is_special(id)) continue;
    bytes[static_cast<std::size_t>(id)] = tokenizer.token_bytes(id);
  }
  return std::make_shared<const TokenTrie>(bytes);
}

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenTrie> trie, std::vector<TokenId> end_token_ids)
    : trie_(std::move(trie)), end_token_ids_(std::move(end_token_ids)) {
  SLUICE_CHECK(trie_ != nullptr);
}

void JsonConstraint::fill_allowed(std::span<std::uint64_t> allowed_bits) {
  bool any = false;
  if (!state_.is_complete()) {
    const auto& nodes = trie_->nodes();
    trie_->walk(state_, [&](std::uint32_t node, const JsonAcceptor&) {
      for (TokenId t : trie_->tokens_at(nodes[node])) {
        allow(allowed_bits, t);
        any = true;
      }
    });
  }
  // Complete, or a vocabulary with no way forward (no single-byte tokens):
  // ending is the only valid move left.
  if (state_.is_complete() || !any)
    for (TokenId t : end_token_ids_) allow(allowed_bits, t);
}

Status JsonConstraint::accept(TokenId token) {
  if (std::find(end_token_ids_.begin(), end_token_ids_.end(), token) != end_token_ids_.end()) return Ok{};
  if (token < 0 || token >= trie_->vocab_size() || !trie_->bytes_of(token))
    return Error{fmt::format("JSON mode: token {} is not allowed here", token)};
  JsonAcceptor next = state_;
  if (!next.feed(*trie_->bytes_of(token)))
    return Error{fmt::format("JSON mode: token {} does not continue a valid JSON object", token)};
  state_ = next;
  return Ok{};
}

}  // namespace sluice::structured
