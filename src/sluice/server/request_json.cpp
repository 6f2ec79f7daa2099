#include "sluice/server/request_json.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "sluice/common/utf8_append.h"
#include "sluice/common/utf8_checker.h"

namespace sluice::server {
namespace {

using Json = nlohmann::ordered_json;

struct ParseError {
  std::string message;
};

// Bytes a string may hold as they are: printable ASCII but '"' and '\'.
constexpr std::array<bool, 256> kPlainStringByte = [] {
  std::array<bool, 256> plain{};
  for (int b = 0x20; b < 0x80; ++b) plain[static_cast<std::size_t>(b)] = b != '"' && b != '\\';
  return plain;
}();

class Parser {
 public:
  explicit Parser(std::string_view text) : p_(text.data()), begin_(text.data()), end_(text.data() + text.size()) {}

  Json parse_document() {
    if (end_ - p_ >= 3 && std::string_view(p_, 3) == "\xEF\xBB\xBF") p_ += 3;  // a UTF-8 BOM, as nlohmann allows
    skip_whitespace();
    Json value = parse_value(0);
    skip_whitespace();
    if (p_ != end_) fail("unexpected data after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    throw ParseError{fmt::format("{} at byte {}", what, p_ - begin_)};
  }

  void skip_whitespace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  void expect_literal(std::string_view literal) {
    if (static_cast<std::size_t>(end_ - p_) < literal.size() || std::string_view(p_, literal.size()) != literal)
      fail("invalid literal");
    p_ += literal.size();
  }

  Json parse_value(int depth) {
    if (p_ >= end_) fail("unexpected end of input");
    switch (*p_) {
      case '{': return parse_object(depth + 1);
      case '[': return parse_array(depth + 1);
      case '"': return parse_string();
      case 't': expect_literal("true"); return true;
      case 'f': expect_literal("false"); return false;
      case 'n': expect_literal("null"); return nullptr;
      default: return parse_number();
    }
  }

  Json parse_object(int depth) {
    if (depth > kMaxJsonDepth) fail("nesting too deep");
    ++p_;
    Json object = Json::object();
    skip_whitespace();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      return object;
    }
    while (true) {
      skip_whitespace();
      if (p_ >= end_ || *p_ != '"') fail("expected a string key");
      std::string key = parse_string();
      skip_whitespace();
      if (p_ >= end_ || *p_ != ':') fail("expected ':'");
      ++p_;
      skip_whitespace();
      object[std::move(key)] = parse_value(depth);
      skip_whitespace();
      if (p_ >= end_) fail("unexpected end of input in an object");
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ == '}') {
        ++p_;
        return object;
      }
      fail("expected ',' or '}'");
    }
  }

  Json parse_array(int depth) {
    if (depth > kMaxJsonDepth) fail("nesting too deep");
    ++p_;
    Json array = Json::array();
    skip_whitespace();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      return array;
    }
    while (true) {
      skip_whitespace();
      array.push_back(parse_value(depth));
      skip_whitespace();
      if (p_ >= end_) fail("unexpected end of input in an array");
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ == ']') {
        ++p_;
        return array;
      }
      fail("expected ',' or ']'");
    }
  }

  unsigned hex4() {
    if (end_ - p_ < 4) fail("truncated \\u escape");
    unsigned value = 0;
    for (int i = 0; i < 4; ++i, ++p_) {
      const char c = *p_;
      value <<= 4;
      if (c >= '0' && c <= '9') value |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') value |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') value |= static_cast<unsigned>(c - 'A' + 10);
      else fail("invalid \\u escape");
    }
    return value;
  }

  void parse_escape(std::string& out) {
    ++p_;  // the backslash
    if (p_ >= end_) fail("truncated escape");
    const char c = *p_++;
    switch (c) {
      case '"': out.push_back('"'); return;
      case '\\': out.push_back('\\'); return;
      case '/': out.push_back('/'); return;
      case 'b': out.push_back('\b'); return;
      case 'f': out.push_back('\f'); return;
      case 'n': out.push_back('\n'); return;
      case 'r': out.push_back('\r'); return;
      case 't': out.push_back('\t'); return;
      case 'u': break;
      default: fail("invalid escape");
    }
    unsigned cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') fail("high surrogate without a low one");
      p_ += 2;
      const unsigned low = hex4();
      if (low < 0xDC00 || low > 0xDFFF) fail("high surrogate without a low one");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, static_cast<char32_t>(cp));
  }

  // One UTF-8 character starting at a byte >= 0x80 (RFC 3629 ranges).
  void copy_utf8_character(std::string& out) {
    const char* start = p_;
    Utf8Checker utf8;
    do {
      if (p_ == end_ || !utf8.feed(static_cast<unsigned char>(*p_))) fail("invalid UTF-8");
      ++p_;
    } while (utf8.mid_character());
    out.append(start, static_cast<std::size_t>(p_ - start));
  }

  // Eight bytes at a time while none of them ends a plain run: no byte below
  // 0x20 or from 0x80, no '"' and no '\\' (the classic has-zero-byte tests).
  void skip_plain_words() {
    constexpr std::uint64_t kOnes = 0x0101010101010101ull;
    constexpr std::uint64_t kHighs = 0x8080808080808080ull;
    while (end_ - p_ >= 8) {
      std::uint64_t w;
      std::memcpy(&w, p_, 8);
      const std::uint64_t quote = w ^ (kOnes * '"');
      const std::uint64_t backslash = w ^ (kOnes * '\\');
      const std::uint64_t special = ((w - kOnes * 0x20) | (quote - kOnes) | (backslash - kOnes) | w) & kHighs;
      // A high bit from the subtractions marks a byte below 0x20, a quote or a
      // backslash (or a borrow from one: the byte loop sorts that out); one
      // from w itself marks a byte from 0x80.
      if (special != 0) return;
      p_ += 8;
    }
  }

  std::string parse_string() {
    ++p_;  // the opening quote
    std::string out;
    while (true) {
      const char* run = p_;
      skip_plain_words();
      while (p_ < end_ && kPlainStringByte[static_cast<unsigned char>(*p_)]) ++p_;
      out.append(run, static_cast<std::size_t>(p_ - run));
      if (p_ >= end_) fail("unterminated string");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return out;
      }
      if (c == '\\') parse_escape(out);
      else if (c < 0x20) fail("control character in a string");
      else copy_utf8_character(out);
    }
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  Json parse_number() {
    const char* start = p_;
    if (p_ < end_ && *p_ == '-') ++p_;
    if (p_ >= end_ || !is_digit(*p_)) fail("invalid value");
    if (*p_ == '0') ++p_;
    else
      while (p_ < end_ && is_digit(*p_)) ++p_;
    bool is_float = false;
    if (p_ < end_ && *p_ == '.') {
      is_float = true;
      ++p_;
      if (p_ >= end_ || !is_digit(*p_)) fail("invalid number");
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      is_float = true;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ >= end_ || !is_digit(*p_)) fail("invalid number");
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    const std::string token(start, p_);
    if (!is_float) {
      char* parsed_end = nullptr;
      errno = 0;
      if (token[0] == '-') {
        const long long value = std::strtoll(token.c_str(), &parsed_end, 10);
        if (errno == 0) return static_cast<std::int64_t>(value);
      } else {
        const unsigned long long value = std::strtoull(token.c_str(), &parsed_end, 10);
        if (errno == 0) return static_cast<std::uint64_t>(value);
      }
    }
    // Floats, and integers too large for 64 bits (as nlohmann stores them).
    const double value = std::strtod(token.c_str(), nullptr);
    if (!std::isfinite(value)) fail("number overflow");
    return value;
  }

  const char* p_;
  const char* const begin_;
  const char* const end_;
};

}  // namespace

Result<nlohmann::ordered_json> parse_request_json(std::string_view text) {
  try {
    return Parser(text).parse_document();
  } catch (const ParseError& e) {
    return Error{e.message};
  }
}

}  // namespace sluice::server
