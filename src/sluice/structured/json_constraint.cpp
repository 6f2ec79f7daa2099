#include "sluice/structured/json_constraint.h"

#include <algorithm>

#include <fmt/format.h>

#include "sluice/common/check.h"
#include "sluice/common/token_mask.h"

namespace sluice::structured {
namespace {

void allow(std::span<std::uint64_t> bits, TokenId token) {
  const auto t = static_cast<std::size_t>(token);
  if (t / 64 < bits.size()) bits[t / 64] |= std::uint64_t{1} << (t % 64);
}

// Plain string content: fed inside a string it stays inside that string
// with nothing half done, whatever came before.
bool is_plain_string_content(const std::string& bytes) {
  if (bytes.find_first_of("\"\\") != std::string::npos) return false;
  JsonAcceptor in_string;
  return in_string.feed(std::string_view("{\"")) && in_string.feed(bytes) && in_string.in_plain_string();
}

std::vector<std::uint64_t> plain_string_bits_of(std::span<const std::optional<std::string>> token_bytes) {
  std::vector<std::uint64_t> bits(num_token_mask_words(static_cast<std::int32_t>(token_bytes.size())), 0);
  for (std::size_t id = 0; id < token_bytes.size(); ++id)
    if (token_bytes[id] && !token_bytes[id]->empty() && is_plain_string_content(*token_bytes[id]))
      allow(bits, static_cast<TokenId>(id));
  return bits;
}

std::vector<std::optional<std::string>> without(std::span<const std::optional<std::string>> token_bytes,
                                                std::span<const std::uint64_t> excluded_bits) {
  std::vector<std::optional<std::string>> rest(token_bytes.begin(), token_bytes.end());
  for (std::size_t id = 0; id < rest.size(); ++id)
    if (token_mask_allows(excluded_bits, static_cast<TokenId>(id))) rest[id].reset();
  return rest;
}

}  // namespace

JsonVocabulary::JsonVocabulary(std::span<const std::optional<std::string>> token_bytes)
    : plain_string_bits_(plain_string_bits_of(token_bytes)),
      all_tokens_(token_bytes),
      not_plain_string_tokens_(without(token_bytes, plain_string_bits_)) {}

std::shared_ptr<const JsonVocabulary> make_json_vocabulary(const Tokenizer& tokenizer,
                                                           std::int32_t model_vocab_size) {
  std::vector<std::optional<std::string>> bytes(static_cast<std::size_t>(model_vocab_size));
  for (TokenId id = 0; id < model_vocab_size; ++id) {
    if (tokenizer.is_special(id)) continue;
    bytes[static_cast<std::size_t>(id)] = tokenizer.token_bytes(id);
  }
  return std::make_shared<const JsonVocabulary>(bytes);
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonVocabulary> vocabulary, std::vector<TokenId> end_token_ids)
    : vocabulary_(std::move(vocabulary)), end_token_ids_(std::move(end_token_ids)) {
  SLUICE_CHECK(vocabulary_ != nullptr);
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonVocabulary> vocabulary, std::vector<TokenId> end_token_ids,
                               std::shared_ptr<const JsonSchema> schema)
    : vocabulary_(std::move(vocabulary)),
      end_token_ids_(std::move(end_token_ids)),
      schema_(std::move(schema)),
      state_(SchemaAcceptor(*schema_)) {
  SLUICE_CHECK(vocabulary_ != nullptr);
}

void JsonConstraint::fill_allowed(std::span<std::uint64_t> allowed_bits) {
  // Complete, or a vocabulary with no way forward (no single-byte tokens):
  // ending is the only valid move left. A top-level number may also end
  // while it could still go on.
  const bool any = std::visit([&](const auto& state) { return add_json_mask(*vocabulary_, state, allowed_bits); }, state_);
  const bool can_end = std::holds_alternative<SchemaAcceptor>(state_) && std::get<SchemaAcceptor>(state_).can_end();
  if (!any || can_end)
    for (TokenId t : end_token_ids_) allow(allowed_bits, t);
}

Status JsonConstraint::accept(TokenId token) {
  if (std::find(end_token_ids_.begin(), end_token_ids_.end(), token) != end_token_ids_.end()) return Ok{};
  const TokenTrie& trie = vocabulary_->all_tokens();
  if (token < 0 || token >= trie.vocab_size() || !trie.bytes_of(token))
    return Error{fmt::format("JSON mode: token {} is not allowed here", token)};
  auto next = state_;
  const bool fits = std::visit([&](auto& state) { return state.feed(*trie.bytes_of(token)); }, next);
  if (!fits)
    return Error{fmt::format("JSON mode: token {} does not continue a valid {}", token,
                             schema_ ? "document for the schema" : "JSON object")};
  state_ = next;
  return Ok{};
}

}  // namespace sluice::structured
