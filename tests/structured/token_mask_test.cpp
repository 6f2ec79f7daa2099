// The token mask found by walking the vocabulary trie (plus the precomputed
// plain-string set) equals the brute-force answer (every token's bytes fed to
// a copy of the acceptor), on real tokenizers at states along a JSON document
// that visits keys, strings with escapes and multi-byte characters, numbers
// and literals.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstdio>
#include <string>

#include "../tokenizer/test_support.h"
#include "sluice/common/token_mask.h"
#include "sluice/structured/json_constraint.h"
#include "sluice/structured/json_schema.h"
#include "sluice/structured/schema_acceptor.h"

namespace sluice::structured {
namespace {

template <class Acceptor>
std::vector<std::uint64_t> fast_mask(const JsonVocabulary& vocabulary, const Acceptor& state) {
  std::vector<std::uint64_t> bits(num_token_mask_words(vocabulary.all_tokens().vocab_size()), 0);
  add_json_mask(vocabulary, state, bits);
  return bits;
}

template <class Acceptor>
std::vector<std::uint64_t> brute_force_mask(const Tokenizer& tokenizer, std::int32_t vocab_size,
                                            const Acceptor& state) {
  std::vector<std::uint64_t> bits(num_token_mask_words(vocab_size), 0);
  for (TokenId t = 0; t < vocab_size; ++t) {
    if (tokenizer.is_special(t)) continue;
    const auto bytes = tokenizer.token_bytes(t);
    if (!bytes || bytes->empty()) continue;
    Acceptor copy = state;
    if (copy.feed(*bytes)) bits[static_cast<std::size_t>(t) / 64] |= 1ull << (t % 64);
  }
  return bits;
}

class TokenMask : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenMask, EqualsBruteForce) {
  const Tokenizer& tokenizer = test::cached_tokenizer(GetParam());
  const std::int32_t vocab_size = tokenizer.vocab_size();
  const auto vocabulary = make_json_vocabulary(tokenizer, vocab_size);
  const std::string doc = "{\n  \"name\": \"Zoë \\u00e9 \\\"x\\\"\",\n  \"n\": -12.5e+3, \"ok\": [true, false, null, {}],"
                          " \"日本\": \"語\"}";
  JsonAcceptor state;
  std::size_t num_checked = 0;
  for (std::size_t k = 0; k <= doc.size(); k += 3) {
    JsonAcceptor at = state;
    ASSERT_EQ(fast_mask(*vocabulary, at), brute_force_mask(tokenizer, vocab_size, at)) << "after " << doc.substr(0, k);
    ++num_checked;
    for (std::size_t j = k; j < std::min(doc.size(), k + 3); ++j)
      ASSERT_TRUE(state.feed(static_cast<std::uint8_t>(doc[j])));
  }
  EXPECT_GT(num_checked, 30u);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, TokenMask, ::testing::Values("llama3", "llama2"));

// The same for a schema: keys and enum values are walked (only prefixes of
// the declared names fit), free strings use the plain-string bitmask. Also
// prints the mask cost per state, for docs/benchmarks.md.
TEST(SchemaTokenMask, EqualsBruteForceOnLlama3) {
  const Tokenizer& tokenizer = test::cached_tokenizer("llama3");
  const std::int32_t vocab_size = tokenizer.vocab_size();
  const auto vocabulary = make_json_vocabulary(tokenizer, vocab_size);
  auto schema = compile_json_schema(nlohmann::json::parse(R"({"type":"object","properties":{
      "name":{"type":"string"},"names":{"type":"array","items":{"type":"string"},"maxItems":3},
      "age":{"type":"integer"},"score":{"type":"number"},"color":{"enum":["red","green","gr\"een",null,12]},
      "extra":{"type":"object","additionalProperties":{"type":"boolean"}}},
    "required":["name","age"],"additionalProperties":false})"));
  ASSERT_TRUE(schema.ok()) << schema.error_message();
  const std::string doc = "{\n  \"name\": \"Zoë \\u00e9 \\\"x\\\"\", \"age\": 42, \"names\": [\"日本\", \"a b\"],"
                          " \"color\": \"gr\\\"een\", \"score\": -12.5e+3, \"extra\": {\"nam\": true, \"k\": false}}";
  SchemaAcceptor state(**schema);
  std::size_t num_checked = 0;
  double fast_us = 0;
  for (std::size_t k = 0; k <= doc.size(); k += 2) {
    const auto start = std::chrono::steady_clock::now();
    const auto fast = fast_mask(*vocabulary, state);
    fast_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(fast, brute_force_mask(tokenizer, vocab_size, state)) << "after " << doc.substr(0, k);
    ++num_checked;
    for (std::size_t j = k; j < std::min(doc.size(), k + 2); ++j)
      ASSERT_TRUE(state.feed(static_cast<std::uint8_t>(doc[j]))) << doc.substr(0, j + 1);
  }
  EXPECT_TRUE(state.is_complete());
  EXPECT_GT(num_checked, 50u);
  std::printf("schema mask on llama3 (%d tokens): %.0f us per state on average over %zu states\n", vocab_size,
              fast_us / static_cast<double>(num_checked), num_checked);
}

// The constraint's mask as it stands, in a fresh vector.
std::vector<std::uint64_t> allowed_now(TokenConstraint& constraint, std::int32_t vocab_size) {
  std::vector<std::uint64_t> bits(num_token_mask_words(vocab_size), 0);
  constraint.fill_allowed(bits);
  return bits;
}

std::int64_t count_allowed(const std::vector<std::uint64_t>& bits) {
  std::int64_t n = 0;
  for (std::uint64_t w : bits) n += std::popcount(w);
  return n;
}

TEST(JsonConstraint, AllowsOnlyEndTokensOnceTheObjectCloses) {
  const Tokenizer& tokenizer = test::cached_tokenizer("llama3");
  const std::int32_t vocab_size = tokenizer.vocab_size();
  const TokenId eos = *tokenizer.eos_token_id();
  JsonConstraint constraint(make_json_vocabulary(tokenizer, vocab_size), {eos});
  for (TokenId t : tokenizer.encode("{\"a\": [1, 2]", false)) ASSERT_TRUE(constraint.accept(t).ok());
  std::vector<std::uint64_t> bits = allowed_now(constraint, vocab_size);
  EXPECT_FALSE(token_mask_allows(bits, eos));
  EXPECT_TRUE(token_mask_allows(bits, *tokenizer.token_to_id("}")));
  EXPECT_FALSE(token_mask_allows(bits, *tokenizer.token_to_id("]")));
  EXPECT_FALSE(constraint.accept(*tokenizer.token_to_id("]")).ok());
  ASSERT_TRUE(constraint.accept(*tokenizer.token_to_id("}")).ok());
  EXPECT_TRUE(constraint.is_complete());
  bits = allowed_now(constraint, vocab_size);
  EXPECT_EQ(count_allowed(bits), 1);
  EXPECT_TRUE(token_mask_allows(bits, eos));
  // Special tokens never appear under a constraint, even inside strings.
  JsonConstraint in_string(make_json_vocabulary(tokenizer, vocab_size), {eos});
  for (TokenId t : tokenizer.encode("{\"a\": \"", false)) ASSERT_TRUE(in_string.accept(t).ok());
  bits = allowed_now(in_string, vocab_size);
  for (TokenId t = 0; t < vocab_size; ++t) {
    if (tokenizer.is_special(t)) {
      ASSERT_FALSE(token_mask_allows(bits, t)) << t;
    }
  }
}

// A top-level number under a schema may end or go on; once the document is
// complete only end tokens remain.
TEST(JsonConstraint, SchemaTopLevelNumberMayEndOrGoOn) {
  const Tokenizer& tokenizer = test::cached_tokenizer("llama3");
  const std::int32_t vocab_size = tokenizer.vocab_size();
  const TokenId eos = *tokenizer.eos_token_id();
  auto schema = compile_json_schema(nlohmann::json::parse(R"({"enum":[1,12,"a"]})"));
  ASSERT_TRUE(schema.ok());
  JsonConstraint constraint(make_json_vocabulary(tokenizer, vocab_size), {eos}, *schema);
  std::vector<std::uint64_t> bits = allowed_now(constraint, vocab_size);
  EXPECT_FALSE(token_mask_allows(bits, eos));
  EXPECT_TRUE(token_mask_allows(bits, *tokenizer.token_to_id("12")));
  EXPECT_FALSE(token_mask_allows(bits, *tokenizer.token_to_id("2")));
  ASSERT_TRUE(constraint.accept(*tokenizer.token_to_id("1")).ok());
  bits = allowed_now(constraint, vocab_size);
  EXPECT_TRUE(token_mask_allows(bits, eos));
  EXPECT_TRUE(token_mask_allows(bits, *tokenizer.token_to_id("2")));
  EXPECT_FALSE(token_mask_allows(bits, *tokenizer.token_to_id("3")));
  EXPECT_FALSE(constraint.accept(*tokenizer.token_to_id("3")).ok());
  ASSERT_TRUE(constraint.accept(*tokenizer.token_to_id("2")).ok());
  EXPECT_TRUE(constraint.is_complete());
  bits = allowed_now(constraint, vocab_size);
  EXPECT_EQ(count_allowed(bits), 1);
  EXPECT_TRUE(token_mask_allows(bits, eos));
}

}  // namespace
}  // namespace sluice::structured
