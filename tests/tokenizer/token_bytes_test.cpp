// Tokenizer::token_bytes: the raw bytes each token adds mid-text. Joined over
// an encoding they must give back the text the regular decoder (checked
// against the JavaScript reference) gives, before its UTF-8 repair.
#include <gtest/gtest.h>

#include "test_support.h"

namespace sluice {
namespace {

class TokenBytes : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenBytes, JoinedTokenBytesReproduceTheDecodedText) {
  const Tokenizer& tokenizer = test::cached_tokenizer(GetParam());
  const bool byte_level = GetParam() != "llama2" && GetParam() != "gemma3";
  int num_compared = 0;
  for (const std::string& text : test::corpus()) {
    const std::vector<TokenId> ids = tokenizer.encode(text, false);
    std::string joined;
    for (TokenId id : ids) {
      const auto bytes = tokenizer.token_bytes(id);
      ASSERT_TRUE(bytes.has_value()) << id;
      joined += *bytes;
    }
    const std::string decoded = tokenizer.decode(ids, false);
    if (!test::valid_utf8(joined)) continue;  // the decoder would repair it; nothing to compare
    ++num_compared;
    if (byte_level) {
      EXPECT_EQ(joined, decoded) << text;
    } else {
      // SentencePiece-style decoders strip the space the normalizer prepended.
      EXPECT_TRUE(joined == decoded || joined == " " + decoded) << text;
    }
  }
  EXPECT_GT(num_compared, 200);
}

TEST_P(TokenBytes, SplitCharactersKeepTheirRawBytes) {
  const Tokenizer& tokenizer = test::cached_tokenizer(GetParam());
  // Somewhere in every vocabulary a token carries part of a UTF-8 character:
  // its bytes must be the raw bytes, not U+FFFD.
  int num_partial = 0;
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    const auto bytes = tokenizer.token_bytes(id);
    if (!bytes || test::valid_utf8(*bytes)) continue;
    ++num_partial;
    EXPECT_EQ(bytes->find("\xEF\xBF\xBD"), std::string::npos) << id;
  }
  EXPECT_GT(num_partial, 0);
  EXPECT_FALSE(tokenizer.token_bytes(-1).has_value());
  EXPECT_FALSE(tokenizer.token_bytes(tokenizer.vocab_size()).has_value());
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, TokenBytes,
                         ::testing::Values("llama3", "qwen3", "deepseek_v3", "llama2", "gemma3"));

}  // namespace
}  // namespace sluice
