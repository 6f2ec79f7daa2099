// JsonAcceptor: a byte-at-a-time recognizer of JSON text (RFC 8259), the
// state machine behind `response_format: {"type": "json_object"}`. feed()
// says whether a byte can extend what was accepted so far toward a complete
// document; the state is a small value type so the token-mask search can copy
// it at every branch of the vocabulary trie.
//
// Deliberate limits (each keeps a model from running on forever inside an
// otherwise valid document): nesting deeper than kMaxDepth, and more than
// kMaxWhitespaceRun whitespace bytes in a row, are refused.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "sluice/structured/json_lexemes.h"

namespace sluice::structured {

class JsonAcceptor {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxWhitespaceRun = 64;

  // top_level_object: the document must be an object (what OpenAI's JSON mode
  // asks of a model); otherwise any JSON value, e.g. a bare number.
  explicit JsonAcceptor(bool top_level_object = true) : top_level_object_(top_level_object) {}

  // Consumes one byte; false (and the state unchanged) if no valid document
  // starts with what was accepted followed by this byte.
  bool feed(std::uint8_t byte);
  // All bytes, or false at the first refused one (the state is then partially
  // advanced: feed a copy when probing).
  bool feed(std::string_view bytes);
  // The document is finished: nothing more may follow but the end of output.
  bool is_complete() const;
  // Inside a string with no escape or multi-byte character half done: any
  // whole UTF-8 text without '"', '\\' or control bytes continues it.
  bool in_plain_string() const { return mode_ == Mode::kString && !utf8_.mid_character(); }

 private:
  enum class Mode : std::uint8_t {
    kStart,          // before the top-level value
    kValue,          // after ':' or ',' in an array: a value must come
    kArrayFirst,     // after '[': a value or ']'
    kObjectFirst,    // after '{': a key or '}'
    kObjectKey,      // after ',' in an object: a key
    kColon,          // after a key
    kAfterValue,     // in a container after a value: ',' or the closing bracket
    kString,         // inside a string (key or value)
    kEscape,         // in an escape (escape_)
    kNumber,         // inside a number (number_)
    kLiteral,        // inside true / false / null
    kDone,
  };

  bool step(std::uint8_t byte);  // feed() without the rollback
  bool feed_structural(std::uint8_t byte);
  bool begin_value(std::uint8_t byte);
  bool feed_string(std::uint8_t byte);
  void end_value();  // a value just finished: to kAfterValue, or kDone at the top
  bool push(std::uint8_t bracket);
  bool feed_whitespace();

  Mode mode_ = Mode::kStart;
  NumberLexer number_;
  bool top_level_object_ = true;
  bool in_key_ = false;            // the current string is an object key
  std::uint8_t depth_ = 0;
  std::uint8_t whitespace_run_ = 0;
  EscapeLexer escape_;
  sluice::Utf8Checker utf8_;               // inside strings
  const char* literal_ = nullptr;  // "true" / "false" / "null" and how far in
  std::uint8_t literal_pos_ = 0;
  std::array<std::uint8_t, kMaxDepth> stack_{};  // '{' or '['
};

}  // namespace sluice::structured
