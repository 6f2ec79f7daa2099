#include "sluice/structured/token_trie.h"

#include <algorithm>


namespace sluice::structured {

TokenTrie::TokenTrie(std::span<const std::optional<std::string>> token_bytes)
    : token_bytes_(token_bytes.begin(), token_bytes.end()) {
  std::vector<TokenId> sorted;
  for (std::size_t id = 0; id < token_bytes_.size(); ++id)
    if (token_bytes_[id] && !token_bytes_[id]->empty()) sorted.push_back(static_cast<TokenId>(id));
  // Byte order (std::string compares as unsigned char), so a node's tokens
  // and children are contiguous runs.
  std::sort(sorted.begin(), sorted.end(), [&](TokenId a, TokenId b) {
    const std::string& x = *token_bytes_[a];
    const std::string& y = *token_bytes_[b];
    return x != y ? x < y : a < b;
  });
  nodes_.emplace_back();
  token_ids_.reserve(sorted.size());
  build(0, sorted, 0);
}

// `sorted` holds the tokens below `node`, all sharing their first `depth`
// bytes. Children are appended as one contiguous run before recursing, so a
// node's children are adjacent in nodes_.
void TokenTrie::build(std::uint32_t node, std::span<const TokenId> sorted, std::size_t depth) {
  std::size_t begin = 0;
  nodes_[node].first_token = static_cast<std::uint32_t>(token_ids_.size());
  while (begin < sorted.size() && token_bytes_[sorted[begin]]->size() == depth) token_ids_.push_back(sorted[begin++]);
  nodes_[node].num_tokens = static_cast<std::uint32_t>(token_ids_.size()) - nodes_[node].first_token;

  struct Group {
    std::size_t begin, end;
  };
  std::vector<Group> groups;
  for (std::size_t i = begin; i < sorted.size();) {
    const char byte = (*token_bytes_[sorted[i]])[depth];
    std::size_t j = i;
    while (j < sorted.size() && (*token_bytes_[sorted[j]])[depth] == byte) ++j;
    groups.push_back({i, j});
    i = j;
  }
  const auto first_child = static_cast<std::uint32_t>(nodes_.size());
  nodes_[node].first_child = first_child;
  nodes_[node].num_children = static_cast<std::uint32_t>(groups.size());
  for (const Group& g : groups) {
    Node child;
    child.byte = static_cast<std::uint8_t>((*token_bytes_[sorted[g.begin]])[depth]);
    nodes_.push_back(child);
  }
  for (std::size_t k = 0; k < groups.size(); ++k)
    build(first_child + static_cast<std::uint32_t>(k), sorted.subspan(groups[k].begin, groups[k].end - groups[k].begin),
          depth + 1);
}

}  // namespace sluice::structured
