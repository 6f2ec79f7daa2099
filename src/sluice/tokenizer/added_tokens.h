// Added tokens (tokenizer.json "added_tokens"): matched in the raw input before
// anything else and never split. Like the reference, every added token (special
// or not) is matched, longest first at the leftmost position, in the text as
// given (the "normalized" flag is not applied: no supported tokenizer has a
// normalizer that would change an added token's text). lstrip / rstrip trim
// the whitespace next to a match, as the reference does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/tokenizer/json_fields.h"

namespace sluice::tokenizer_detail {

struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool lstrip = false;
  bool rstrip = false;
  bool special = false;
};

// A run of the input: either text to tokenize or one added token.
struct Section {
  std::string_view text;
  TokenId added_id = -1;  // >= 0 when this section is an added token
  std::int32_t token_index = -1;  // which added token (internal)
};

class AddedTokenSplitter {
 public:
  explicit AddedTokenSplitter(const std::vector<AddedToken>& tokens);
  AddedTokenSplitter() = default;
  // Splits `text` into sections (empty text sections are kept, as the
  // reference counts them for Metaspace's section index).
  void split(std::string_view text, std::vector<Section>& sections) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> children;  // sorted by byte
    std::int32_t token = -1;  // index into tokens_ when a token ends here
  };
  std::int32_t child(std::int32_t node, unsigned char byte) const;
  std::vector<Node> nodes_;
  std::vector<AddedToken> tokens_;
  std::array<bool, 256> can_start_{};
};

// Parses "added_tokens" (null or absent: none).
std::vector<AddedToken> added_tokens_from_json(const Json* value, std::string_view path);

}  // namespace sluice::tokenizer_detail
