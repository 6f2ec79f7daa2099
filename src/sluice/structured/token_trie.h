// TokenTrie: the model's vocabulary as a trie over each token's bytes, so a
// byte-level acceptor can find every allowed token in one walk: a prefix that
// fails prunes every token below it (in JSON most tokens fail on their first
// byte outside strings). Built once per model, then read-only and shared.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sluice/common/ids.h"

namespace sluice::structured {

class TokenTrie {
 public:
  struct Node {
    std::uint32_t first_child = 0;  // children are nodes [first_child, first_child + num_children)
    std::uint32_t num_children = 0;
    std::uint32_t first_token = 0;  // tokens ending here: token_ids()[first_token, + num_tokens)
    std::uint32_t num_tokens = 0;
    std::uint8_t byte = 0;          // the edge byte from the parent
  };

  // token_bytes[id]: what token `id` adds to the output, or nullopt if it may
  // never be produced under a constraint (special tokens, holes). Empty
  // strings are left out too: they would let a model stall forever.
  explicit TokenTrie(std::span<const std::optional<std::string>> token_bytes);

  const std::vector<Node>& nodes() const { return nodes_; }  // nodes()[0] is the root
  std::span<const TokenId> tokens_at(const Node& node) const {
    return std::span<const TokenId>(token_ids_).subspan(node.first_token, node.num_tokens);
  }
  const std::optional<std::string>& bytes_of(TokenId id) const { return token_bytes_.at(static_cast<std::size_t>(id)); }
  std::int32_t vocab_size() const { return static_cast<std::int32_t>(token_bytes_.size()); }

  // Calls visit(node_index, state) for every node whose path the acceptor
  // accepts, depth first; `State` is a copyable value with bool feed(uint8_t),
  // and optionally bool feed_or_spoil(uint8_t) (feed without the rollback:
  // each probe runs on a copy that is dropped when it fails).
  template <class State, class Visit>
  void walk(const State& root, Visit&& visit) const;

 private:
  void build(std::uint32_t node, std::span<const TokenId> sorted, std::size_t depth);

  std::vector<std::optional<std::string>> token_bytes_;
  std::vector<Node> nodes_;
  std::vector<TokenId> token_ids_;
};

template <class State, class Visit>
void TokenTrie::walk(const State& root, Visit&& visit) const {
  struct Frame {
    std::uint32_t node;
    State state;
  };
  std::vector<Frame> stack;
  stack.push_back({0, root});
  while (!stack.empty()) {
    Frame frame = std::move(stack.back());
    stack.pop_back();
    const Node& node = nodes_[frame.node];
    for (std::uint32_t c = node.first_child; c < node.first_child + node.num_children; ++c) {
      State next = frame.state;
      bool fits = false;
      if constexpr (requires { next.feed_or_spoil(std::uint8_t{}); })
        fits = next.feed_or_spoil(nodes_[c].byte);
      else
        fits = next.feed(nodes_[c].byte);
      if (!fits) continue;
      visit(c, next);
      stack.push_back({c, std::move(next)});
    }
  }
}

}  // namespace sluice::structured
