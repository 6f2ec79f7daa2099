// parse_request_json against nlohmann::ordered_json::parse as the oracle: on
// generated documents, on byte-level mutations of them, and on the edge cases
// of numbers, escapes and UTF-8, both accept the same texts and build equal
// values with the same number types. Its error messages say what and where.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "../support/byte_mutation.h"

#include "sluice/server/request_json.h"

namespace sluice::server {
namespace {

using Json = nlohmann::ordered_json;

// Equal values, and equal types all the way down (nlohmann's == calls 1 and
// 1u equal; the request parser tells them apart).
bool same(const Json& a, const Json& b) {
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    auto ia = a.begin();
    auto ib = b.begin();
    for (; ia != a.end(); ++ia, ++ib)
      if (ia.key() != ib.key() || !same(ia.value(), ib.value())) return false;
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!same(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

void expect_agrees(const std::string& text) {
  const Json oracle = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto ours = parse_request_json(text);
  ASSERT_EQ(ours.ok(), !oracle.is_discarded())
      << Json(text).dump(-1, ' ', false, Json::error_handler_t::replace) << " -> "
      << (ours.ok() ? std::string("accepted") : ours.error_message());
  if (ours.ok()) {
    ASSERT_TRUE(same(ours.value(), oracle)) << ours->dump() << " vs " << oracle.dump();
  }
}

Json random_value(std::mt19937_64& rng, int depth) {
  static const std::vector<std::string> strings = {"", "prompt", "héllo wörld", "日本語", "tab\there", "q\"uote",
                                                   "back\\slash", "ctl\x01\x1f", "😀 emoji", "new\nline", "\x7f"};
  switch (std::uniform_int_distribution<int>(0, depth >= 4 ? 5 : 7)(rng)) {
    case 0: return nullptr;
    case 1: return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    case 2: return std::uniform_int_distribution<std::int64_t>(-5000000000, 5000000000)(rng);
    case 3: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
    case 4: return std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng),
                              std::uniform_int_distribution<int>(-1000, 1000)(rng));
    case 5: return strings[std::uniform_int_distribution<std::size_t>(0, strings.size() - 1)(rng)];
    case 6: {
      Json array = Json::array();
      for (int n = std::uniform_int_distribution<int>(0, 3)(rng); n > 0; --n) array.push_back(random_value(rng, depth + 1));
      return array;
    }
    default: {
      Json object = Json::object();
      for (int n = std::uniform_int_distribution<int>(0, 3)(rng); n > 0; --n)
        object[strings[std::uniform_int_distribution<std::size_t>(0, strings.size() - 1)(rng)]] =
            random_value(rng, depth + 1);
      return object;
    }
  }
}

TEST(RequestJson, AgreesWithNlohmannOnGeneratedAndMutatedDocuments) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "{}[]\",:\\ \n\t0123456789.eE+-truefalsnubdDcA\x01\x7f\xc3\xa9\xe6\x97\xa5\xff\xed\xa0\xf0\x80";
  int num_valid = 0;
  for (int i = 0; i < 6000; ++i) {
    std::string doc = random_value(rng, 0).dump(std::uniform_int_distribution<int>(-1, 2)(rng), ' ',
                                                std::uniform_int_distribution<int>(0, 1)(rng) == 1);
    testing::mutate_bytes(doc, std::uniform_int_distribution<int>(0, 3)(rng), alphabet, rng);
    num_valid += Json::accept(doc) ? 1 : 0;
    expect_agrees(doc);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(num_valid, 1500);
  EXPECT_LT(num_valid, 5500);
}

TEST(RequestJson, EdgeCasesAgree) {
  for (const char* text :
       {"", " ", "{}", "[]", "\xEF\xBB\xBF{}", "{} x", "{\"a\":1,\"a\":2}", "{\"b\":1,\"a\":2,\"b\":3}", "-0", "0",
        "01", "-", "1.", ".5", "1e", "1e+", "1E-7", "9223372036854775807", "9223372036854775808",
        "18446744073709551615", "18446744073709551616", "-9223372036854775808", "-9223372036854775809", "1e308",
        "1e309", "-1e309", "1e-400", "123456789012345678901234567890", "\"\\u0000\"", "\"\\ud83d\\ude00\"",
        "\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83dx\"", "\"\\u12\"", "\"\\x\"", "\"\xc0\x80\"", "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"", "\"\xf0\x9f\x98\x80\"", "\"\xe6\x97\"", "\"a\x1f\"", "\"a\x7f\"", "tru", "nulll",
        "[1,]", "{\"a\"}", "{\"a\":}", "{,}", "[1 2]", "\t\r\n{\"k\" : [ true , false , null ] }\n"}) {
    expect_agrees(text);
  }
}

TEST(RequestJson, LongPromptStringRoundTrips) {
  std::string prompt;
  for (int i = 0; prompt.size() < 400000; ++i) prompt += i % 7 == 0 ? "日本 " : "word \\n ";
  const std::string body = "{\"model\":\"m\",\"prompt\":\"" + prompt + "\",\"max_tokens\":1}";
  expect_agrees(body);
  EXPECT_FALSE(parse_request_json(std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']')).ok());
  EXPECT_TRUE(parse_request_json(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']')).ok());
}

// The byte each error names, counted by hand: where the bad token starts, the
// bad byte of a string, or the end for what the input leaves open.
TEST(RequestJson, ErrorsSayWhatAndAtWhichByte) {
  struct Case {
    std::string text, what, at;
  };
  const std::vector<Case> cases = {
      {R"({"a":1,})", "improper structure", "at byte 7"},
      {R"({"a":1} {})", "improper structure", "at byte 8"},
      {R"({"a":[1,2})", "improper structure", "at byte 9"},
      {"\xEF\xBB\xBF{\"a\":1,}", "improper structure", "at byte 10"},
      {R"({"a":tru})", "invalid literal", "at byte 5"},
      {"nul", "invalid literal", "at byte 0"},
      {R"({"n":01})", "number", "at byte 5"},
      {"{\"a\":\"x\xc3(\"}", "UTF-8", "at byte 8"},
      {"{\"a\":\"x\x01\"}", "escaped", "at byte 7"},
      {R"({"a":"abc)", "never closed", "at byte 9"},
      {"", "no JSON value", "at byte 0"},
      {std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']'), "nesting deeper than 256",
       "at byte 256"},
  };
  for (const Case& c : cases) {
    const auto result = parse_request_json(c.text);
    ASSERT_FALSE(result.ok()) << c.text;
    EXPECT_NE(result.error_message().find(c.what), std::string::npos) << c.text << ": " << result.error_message();
    EXPECT_TRUE(result.error_message().ends_with(c.at)) << c.text << ": " << result.error_message();
  }
}

}  // namespace
}  // namespace sluice::server
