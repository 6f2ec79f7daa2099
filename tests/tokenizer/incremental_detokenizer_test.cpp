// IncrementalDetokenizer: chunks are valid UTF-8, concatenate to the full
// decode, and hold back characters whose bytes are split across ids.
#include <gtest/gtest.h>

#include <algorithm>

#include "test_support.h"

namespace sluice::test {
namespace {

struct Streamed {
  std::vector<std::string> chunks;  // one per push, then the flush
  std::string text;
};

Streamed stream(const Tokenizer& tokenizer, const std::vector<TokenId>& ids, bool skip_special_tokens) {
  IncrementalDetokenizer detokenizer(tokenizer, skip_special_tokens);
  Streamed out;
  for (const TokenId id : ids) out.chunks.push_back(detokenizer.push(id));
  out.chunks.push_back(detokenizer.flush());
  for (const auto& chunk : out.chunks) out.text += chunk;
  return out;
}

class IncrementalDetokenizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(IncrementalDetokenizerTest, CorpusChunksAreValidAndConcatenateToDecode) {
  const Tokenizer& tokenizer = cached_tokenizer(GetParam());
  for (const std::string& text : corpus()) {
    // With special tokens, so that BOS and any special-token strings are streamed too.
    const auto ids = tokenizer.encode(text, /*add_special_tokens=*/true);
    for (const bool skip : {false, true}) {
      const Streamed streamed = stream(tokenizer, ids, skip);
      ASSERT_EQ(streamed.text, tokenizer.decode(ids, skip)) << GetParam() << " \"" << text << "\" skip=" << skip;
      for (const auto& chunk : streamed.chunks) {
        ASSERT_TRUE(valid_utf8(chunk)) << GetParam() << " \"" << text << "\"";
      }
    }
  }
}

TEST_P(IncrementalDetokenizerTest, SkipSpecialTokensDropsThem) {
  const Tokenizer& tokenizer = cached_tokenizer(GetParam());
  const auto eos = tokenizer.eos_token_id();
  ASSERT_TRUE(eos.has_value());
  ASSERT_TRUE(tokenizer.is_special(*eos));
  auto ids = tokenizer.encode("Hello there", false);
  ids.push_back(*eos);
  const std::string with = stream(tokenizer, ids, false).text;
  const std::string without = stream(tokenizer, ids, true).text;
  EXPECT_EQ(with, without + tokenizer.eos_token());
  EXPECT_EQ(without, tokenizer.decode(ids, true));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, IncrementalDetokenizerTest,
                         ::testing::Values("llama3", "qwen3", "deepseek_v3", "llama2", "gemma3"),
                         [](const auto& info) { return info.param; });

// Byte-level BPE splits rare characters mid-sequence: the bytes of 𠀀 (F0 A0 80 80)
// come in three ids in Llama 3; nothing may be emitted until the last one.
TEST(IncrementalDetokenizer, HoldsBackByteLevelCharacterSplitAcrossIds) {
  const Tokenizer& tokenizer = cached_tokenizer("llama3");
  const auto ids = tokenizer.encode("a\xF0\xA0\x80\x80", false);
  ASSERT_EQ(ids.size(), 4u);  // "a" + three ids for one character
  IncrementalDetokenizer detokenizer(tokenizer, false);
  EXPECT_EQ(detokenizer.push(ids[0]), "a");
  EXPECT_EQ(detokenizer.push(ids[1]), "");
  EXPECT_EQ(detokenizer.push(ids[2]), "");
  EXPECT_EQ(detokenizer.push(ids[3]), "\xF0\xA0\x80\x80");
  EXPECT_EQ(detokenizer.flush(), "");
}

// SentencePiece byte fallback: <0xF0><0x9F><0xA4><0x96> is one emoji.
TEST(IncrementalDetokenizer, HoldsBackByteFallbackSequence) {
  const Tokenizer& tokenizer = cached_tokenizer("llama2");
  const auto ids = tokenizer.encode("x \xF0\x9F\xA4\x96 y", false);
  const auto byte_id = [&](const char* token) { return *tokenizer.token_to_id(token); };
  const std::vector<TokenId> emoji = {byte_id("<0xF0>"), byte_id("<0x9F>"), byte_id("<0xA4>"), byte_id("<0x96>")};
  const auto at = std::search(ids.begin(), ids.end(), emoji.begin(), emoji.end());
  ASSERT_NE(at, ids.end()) << "expected the emoji to be byte-fallback tokens";
  const auto first_byte = static_cast<std::size_t>(at - ids.begin());
  IncrementalDetokenizer detokenizer(tokenizer, false);
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string chunk = detokenizer.push(ids[i]);
    if (i >= first_byte && i < first_byte + 3) {
      EXPECT_EQ(chunk, "") << "byte " << i - first_byte;
    }
    if (i == first_byte + 3) {
      EXPECT_TRUE(chunk.ends_with("\xF0\x9F\xA4\x96")) << chunk;
    }
    text += chunk;
  }
  text += detokenizer.flush();
  EXPECT_EQ(text, "x \xF0\x9F\xA4\x96 y");
}

TEST(IncrementalDetokenizer, CjkAndCombiningMarks) {
  for (const char* name : {"llama3", "qwen3", "deepseek_v3", "llama2", "gemma3"}) {
    const Tokenizer& tokenizer = cached_tokenizer(name);
    const std::string text = "漢字かな 한국어 cafe\xCC\x81 n\xCC\x83 Z\xCD\x91\xCD\xA0 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9";
    const auto ids = tokenizer.encode(text, false);
    const Streamed streamed = stream(tokenizer, ids, false);
    EXPECT_EQ(streamed.text, tokenizer.decode(ids, false)) << name;
    for (const auto& chunk : streamed.chunks) EXPECT_TRUE(valid_utf8(chunk)) << name;
    EXPECT_GE(std::count_if(streamed.chunks.begin(), streamed.chunks.end(), [](const auto& c) { return !c.empty(); }), 5)
        << name << ": text should stream out in pieces";
  }
}

// Bytes that never form a character still come out (as U+FFFD, like decode()),
// including a long run that exercises the window cut.
TEST(IncrementalDetokenizer, InvalidByteStreamsMatchDecode) {
  const Tokenizer& tokenizer = cached_tokenizer("llama2");
  const TokenId e4 = *tokenizer.token_to_id("<0xE4>");
  const TokenId b8 = *tokenizer.token_to_id("<0xB8>");
  const TokenId ad = *tokenizer.token_to_id("<0xAD>");
  std::vector<std::vector<TokenId>> cases = {{e4}, {e4, e4}, {b8, ad}, {e4, b8}};
  std::vector<TokenId> long_run(40, e4);
  long_run.push_back(e4);
  long_run.push_back(b8);
  long_run.push_back(ad);
  cases.push_back(long_run);
  auto mixed = tokenizer.encode("ok", false);
  mixed.push_back(e4);
  for (const TokenId id : tokenizer.encode("then", false)) mixed.push_back(id);
  cases.push_back(mixed);
  for (const auto& ids : cases) {
    const Streamed streamed = stream(tokenizer, ids, false);
    EXPECT_EQ(streamed.text, tokenizer.decode(ids, false));
    for (const auto& chunk : streamed.chunks) EXPECT_TRUE(valid_utf8(chunk));
  }
}

TEST(IncrementalDetokenizer, ByteLevelInvalidBytesMatchDecode) {
  const Tokenizer& tokenizer = cached_tokenizer("qwen3");
  // Single-byte tokens for 0xE4 and 0xB8 in byte-level notation.
  const TokenId e4 = *tokenizer.token_to_id("\xC3\xA4");  // 'ä' stands for byte 0xE4
  const TokenId b8 = *tokenizer.token_to_id("\xC2\xB8");  // '¸' stands for byte 0xB8
  const std::vector<TokenId> ids = {e4, b8, e4, e4, b8, b8};
  const Streamed streamed = stream(tokenizer, ids, false);
  EXPECT_EQ(streamed.text, tokenizer.decode(ids, false));
  for (const auto& chunk : streamed.chunks) EXPECT_TRUE(valid_utf8(chunk));
}

}  // namespace
}  // namespace sluice::test
