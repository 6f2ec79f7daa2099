#include "sluice/tokenizer/tokenizer.h"

#include "sluice/tokenizer/tokenizer_model.h"
#include "sluice/tokenizer/utf8.h"

namespace sluice {

using tokenizer_detail::Section;

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const tokenizer_detail::Model& m = *model_;
  std::string repaired;
  text = tokenizer_detail::sanitize_utf8(text, repaired);

  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = m.special_template.before;

  std::vector<Section> sections;
  m.splitter.split(text, sections);
  std::string normalized;
  for (std::size_t index = 0; index < sections.size(); ++index) {
    const Section& section = sections[index];
    if (section.text.empty()) continue;
    if (section.added_id >= 0) {
      ids.push_back(section.added_id);
      continue;
    }
    std::string_view piece = section.text;
    if (!m.normalizer.empty()) {
      normalized.assign(piece);
      m.normalizer.apply(normalized);
      piece = normalized;
      if (piece.empty()) continue;
    }
    const std::size_t first = ids.size();
    m.pre_tokenizer.run(piece, static_cast<int>(index),
                        [&](std::string_view word) { m.bpe.encode_piece(word, ids); });
    if (m.bpe.fuse_unk() && m.bpe.unk_id()) {
      // Consecutive unknowns within one section become one <unk>.
      const TokenId unk = *m.bpe.unk_id();
      std::size_t write = first;
      for (std::size_t read = first; read < ids.size(); ++read) {
        if (ids[read] == unk && write > first && ids[write - 1] == unk) continue;
        ids[write++] = ids[read];
      }
      ids.resize(write);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), m.special_template.after.begin(), m.special_template.after.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  const tokenizer_detail::Model& m = *model_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const TokenId id : ids) {
    const std::string* token = nullptr;
    if (id >= 0 && static_cast<std::size_t>(id) < m.token_of_id.size() && m.token_of_id[static_cast<std::size_t>(id)]) {
      token = &*m.token_of_id[static_cast<std::size_t>(id)];
    } else if (!m.bpe.unk_token().empty()) {
      token = &m.bpe.unk_token();
    } else {
      continue;
    }
    if (skip_special_tokens && m.special_contents.contains(*token)) continue;
    tokens.push_back(*token);
  }
  return m.decoder.decode(std::move(tokens), m.added_contents);
}

std::int32_t Tokenizer::vocab_size() const { return static_cast<std::int32_t>(model_->token_of_id.size()); }

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  return model_->bpe.find_token(token);
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  return model_->token_of_id[static_cast<std::size_t>(id)];
}

std::optional<TokenId> Tokenizer::bos_token_id() const { return model_->bos_id; }
std::optional<TokenId> Tokenizer::eos_token_id() const { return model_->eos_id; }
std::string Tokenizer::bos_token() const { return model_->bos_token; }
std::string Tokenizer::eos_token() const { return model_->eos_token; }
const std::string& Tokenizer::chat_template() const { return model_->chat_template; }

bool Tokenizer::is_special(TokenId id) const {
  const auto token = id_to_token(id);
  return token && model_->special_contents.contains(*token);
}

std::optional<std::string> Tokenizer::token_bytes(TokenId id) const {
  auto token = id_to_token(id);
  if (!token) return std::nullopt;
  const bool is_added = model_->added_contents.contains(*token);
  return model_->decoder.token_bytes(std::move(*token), is_added);
}

}  // namespace sluice
