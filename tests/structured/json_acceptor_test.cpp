// JsonAcceptor against nlohmann::json's parser as the oracle: whole documents
// (generated, pretty-printed or compact, then mutated byte by byte) are
// accepted and complete exactly when the oracle accepts them as a top-level
// object; every prefix of a valid document is accepted.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "../support/byte_mutation.h"

#include "sluice/structured/json_acceptor.h"

namespace sluice::structured {
namespace {

nlohmann::json random_value(std::mt19937_64& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth >= 4 ? 5 : 7);
  static const std::vector<std::string> strings = {"", "a", "héllo", "日本語", "tab\there", "quote\"q", "back\\slash",
                                                   "ctl\x01", "emoji 😀", "new\nline", "/slash"};
  switch (kind(rng)) {
    case 0: return nullptr;
    case 1: return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    case 2: return std::uniform_int_distribution<std::int64_t>(-1000000, 1000000)(rng);
    case 3: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
    case 4: return std::uniform_real_distribution<double>(-1e-8, 1e-8)(rng) * 1e-300;
    case 5: return strings[std::uniform_int_distribution<std::size_t>(0, strings.size() - 1)(rng)];
    case 6: {
      nlohmann::json array = nlohmann::json::array();
      for (int n = std::uniform_int_distribution<int>(0, 3)(rng); n > 0; --n) array.push_back(random_value(rng, depth + 1));
      return array;
    }
    default: {
      nlohmann::json object = nlohmann::json::object();
      for (int n = std::uniform_int_distribution<int>(0, 3)(rng); n > 0; --n)
        object[strings[std::uniform_int_distribution<std::size_t>(0, strings.size() - 1)(rng)]] =
            random_value(rng, depth + 1);
      return object;
    }
  }
}

std::string random_document(std::mt19937_64& rng) {
  nlohmann::json object = nlohmann::json::object();
  for (int n = std::uniform_int_distribution<int>(0, 4)(rng); n > 0; --n)
    object["k" + std::to_string(n)] = random_value(rng, 1);
  const int indent = std::uniform_int_distribution<int>(-1, 4)(rng);
  return object.dump(indent);
}

bool accepts_completely(std::string_view text) {
  JsonAcceptor acceptor;
  return acceptor.feed(text) && acceptor.is_complete();
}

// What the acceptor should say: a valid JSON text whose value is an object,
// with nothing after the closing brace (the output ends there). nullopt where
// the oracle cannot tell: its lexer refuses numbers beyond double range
// (1e309), which RFC 8259's grammar allows.
struct OracleSax : nlohmann::json_sax<nlohmann::json> {
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    if (depth++ == 0) top_is_object = true;
    return true;
  }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth >= 0; }
  bool start_array(std::size_t) override { return ++depth > 0; }
  bool end_array() override { return --depth >= 0; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    overflow = e.id == 406;
    return false;
  }
  int depth = 0;
  bool top_is_object = false;
  bool overflow = false;
};

std::optional<bool> oracle(const std::string& text) {
  OracleSax sax;
  const bool valid = nlohmann::json::sax_parse(text, &sax);
  if (sax.overflow) return std::nullopt;
  const auto last = text.find_last_not_of(" \t\r\n");
  return valid && sax.top_is_object && last == text.size() - 1;
}

TEST(JsonAcceptor, AcceptsEveryPrefixOfValidDocuments) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 300; ++i) {
    const std::string doc = random_document(rng);
    JsonAcceptor acceptor;
    for (std::size_t k = 0; k < doc.size(); ++k) {
      ASSERT_TRUE(acceptor.feed(static_cast<std::uint8_t>(doc[k]))) << "byte " << k << " of " << doc;
      ASSERT_EQ(acceptor.is_complete(), k + 1 == doc.size()) << doc.substr(0, k + 1);
    }
    // Nothing may follow a finished document, not even whitespace.
    EXPECT_FALSE(acceptor.feed(static_cast<std::uint8_t>(' ')));
    EXPECT_FALSE(acceptor.feed(static_cast<std::uint8_t>('{')));
  }
}

TEST(JsonAcceptor, AgreesWithTheParserOnMutatedDocuments) {
  std::mt19937_64 rng(2);
  // No 'd'/'D': a mutation must not create a \uD8xx escape, which the JSON
  // grammar allows but the oracle's parser refuses as a lone surrogate.
  const std::string alphabet = "{}[]\",:\\ \n\t0123456789.eE+-truefalsnabcu\x01\x7f\xc3\xa9\xe6\x97\xa5\xff\xed\xa0\xf0";
  int num_valid = 0;
  int num_unknowable = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string doc = random_document(rng);
    testing::mutate_bytes(doc, std::uniform_int_distribution<int>(1, 3)(rng), alphabet, rng);
    const std::optional<bool> expected = oracle(doc);
    if (!expected) {
      ++num_unknowable;
      continue;
    }
    num_valid += *expected ? 1 : 0;
    ASSERT_EQ(accepts_completely(doc), *expected) << nlohmann::json(doc).dump(-1, ' ', false,
                                                                             nlohmann::json::error_handler_t::replace);
  }
  // The mutations must leave both outcomes well represented.
  EXPECT_GT(num_valid, 200);
  EXPECT_LT(num_valid, 3800);
  EXPECT_LT(num_unknowable, 40);
}

TEST(JsonAcceptor, RefusesBytesThatCannotContinue) {
  JsonAcceptor acceptor;
  EXPECT_FALSE(acceptor.feed(static_cast<std::uint8_t>('[')));  // the top level must be an object
  EXPECT_FALSE(acceptor.feed(static_cast<std::uint8_t>('"')));
  ASSERT_TRUE(acceptor.feed(std::string_view("{\"a\":")));
  const JsonAcceptor before = acceptor;
  EXPECT_FALSE(acceptor.feed(static_cast<std::uint8_t>('}')));
  EXPECT_FALSE(acceptor.feed(static_cast<std::uint8_t>(',')));
  EXPECT_TRUE(acceptor.feed(std::string_view("01")) == false);  // no leading zeros
  JsonAcceptor number = before;
  ASSERT_TRUE(number.feed(std::string_view("-0.5e+3")));
  EXPECT_FALSE(number.feed(static_cast<std::uint8_t>('.')));
  EXPECT_TRUE(number.feed(std::string_view("}")));
  EXPECT_TRUE(number.is_complete());
  JsonAcceptor string = before;
  ASSERT_TRUE(string.feed(std::string_view("\"\\u00e9")));
  EXPECT_FALSE(string.feed(static_cast<std::uint8_t>('\n')));  // raw control character
  EXPECT_FALSE(string.feed(static_cast<std::uint8_t>(0xC0)));  // overlong lead byte
  EXPECT_FALSE(string.feed(std::string_view("\xED\xA0")));     // UTF-16 surrogate in UTF-8
}

TEST(JsonAcceptor, BoundsDepthAndWhitespace) {
  JsonAcceptor deep;
  ASSERT_TRUE(deep.feed(std::string_view("{\"a\":")));
  for (int i = 1; i < JsonAcceptor::kMaxDepth; ++i) ASSERT_TRUE(deep.feed(static_cast<std::uint8_t>('['))) << i;
  EXPECT_FALSE(deep.feed(static_cast<std::uint8_t>('[')));
  EXPECT_TRUE(deep.feed(static_cast<std::uint8_t>(']')));

  JsonAcceptor spaces;
  ASSERT_TRUE(spaces.feed(static_cast<std::uint8_t>('{')));
  for (int i = 0; i < JsonAcceptor::kMaxWhitespaceRun; ++i) ASSERT_TRUE(spaces.feed(static_cast<std::uint8_t>(' ')));
  EXPECT_FALSE(spaces.feed(static_cast<std::uint8_t>('\n')));
  EXPECT_TRUE(spaces.feed(static_cast<std::uint8_t>('}')));
  // Whitespace inside strings is content, not layout: no bound.
  JsonAcceptor text;
  ASSERT_TRUE(text.feed(std::string_view("{\"")));
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(text.feed(static_cast<std::uint8_t>(' ')));
}

TEST(JsonAcceptor, AnyValueAtTheTopWhenAsked) {
  for (const char* text : {"1", "-2.5e3", "\"s\"", "[1,[]]", "null", "{}"}) {
    JsonAcceptor acceptor(/*top_level_object=*/false);
    EXPECT_TRUE(acceptor.feed(std::string_view(text)) && acceptor.is_complete()) << text;
  }
}

}  // namespace
}  // namespace sluice::structured
