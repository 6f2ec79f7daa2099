#include "sluice/tokenizer/added_tokens.h"

#include <algorithm>

#include <fmt/format.h>

#include "sluice/tokenizer/utf8.h"

namespace sluice::tokenizer_detail {

std::vector<AddedToken> added_tokens_from_json(const Json* value, std::string_view path) {
  std::vector<AddedToken> tokens;
  if (value == nullptr) return tokens;
  expect_array(*value, path);
  for (std::size_t i = 0; i < value->size(); ++i) {
    const std::string item_path = fmt::format("{}[{}]", path, i);
    const Json& item = expect_object((*value)[i], item_path);
    AddedToken token;
    token.content = expect_string(required_field(item, "content", item_path), join_path(item_path, "content"));
    const std::int64_t id = expect_int(required_field(item, "id", item_path), join_path(item_path, "id"));
    if (id < 0 || id > INT32_MAX - 1) throw_load_error(join_path(item_path, "id"), fmt::format("id {} out of range", id));
    token.id = static_cast<TokenId>(id);
    token.lstrip = bool_or(item, "lstrip", false, item_path);
    token.rstrip = bool_or(item, "rstrip", false, item_path);
    token.special = bool_or(item, "special", false, item_path);
    if (token.content.empty()) throw_load_error(join_path(item_path, "content"), "empty added token");
    tokens.push_back(std::move(token));
  }
  return tokens;
}

AddedTokenSplitter::AddedTokenSplitter(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  nodes_.emplace_back();
  for (std::size_t t = 0; t < tokens_.size(); ++t) {
    std::int32_t node = 0;
    for (const char ch : tokens_[t].content) {
      const auto byte = static_cast<unsigned char>(ch);
      std::int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<std::int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& children = nodes_[static_cast<std::size_t>(node)].children;
        children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, std::int32_t{-1})),
                        {byte, next});
      }
      node = next;
    }
    // A later duplicate of the same content wins, as in the reference's maps.
    nodes_[static_cast<std::size_t>(node)].token = static_cast<std::int32_t>(t);
    can_start_[static_cast<unsigned char>(tokens_[t].content[0])] = true;
  }
}

std::int32_t AddedTokenSplitter::child(std::int32_t node, unsigned char byte) const {
  const auto& children = nodes_[static_cast<std::size_t>(node)].children;
  const auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, std::int32_t{-1}));
  return it != children.end() && it->first == byte ? it->second : -1;
}

void AddedTokenSplitter::split(std::string_view text, std::vector<Section>& sections) const {
  sections.clear();
  std::size_t start = 0;  // start of the pending text section
  std::size_t i = 0;
  while (i < text.size()) {
    if (!can_start_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    std::int32_t node = 0;
    std::int32_t match = -1;
    std::size_t match_end = i;
    for (std::size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
      if (nodes_[static_cast<std::size_t>(node)].token >= 0) {
        match = nodes_[static_cast<std::size_t>(node)].token;
        match_end = j + 1;
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    if (i > start) sections.push_back(Section{text.substr(start, i - start), -1, -1});
    sections.push_back(Section{text.substr(i, match_end - i), tokens_[static_cast<std::size_t>(match)].id, match});
    i = match_end;
    start = i;
  }
  if (start < text.size()) sections.push_back(Section{text.substr(start), -1, -1});

  // lstrip / rstrip trim whitespace off the neighbouring text sections.
  for (std::size_t s = 0; s < sections.size(); ++s) {
    if (sections[s].token_index < 0) continue;
    const AddedToken* it = &tokens_[static_cast<std::size_t>(sections[s].token_index)];
    if (it->lstrip && s > 0 && sections[s - 1].added_id < 0) {
      sections[s - 1].text = js_trim_end(sections[s - 1].text);
    }
    if (it->rstrip && s + 1 < sections.size() && sections[s + 1].added_id < 0) {
      sections[s + 1].text = js_trim_start(sections[s + 1].text);
    }
  }
}

}  // namespace sluice::tokenizer_detail
