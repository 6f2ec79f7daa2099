// The parts of JSON's lexical grammar that every byte-level acceptor shares
// (JsonAcceptor for JSON mode, SchemaAcceptor for json_schema): character
// classes and the number syntax (UTF-8 inside strings is common/utf8_checker.h).
// Inline because the token-mask search feeds them per byte of every vocabulary
// branch.
#pragma once

#include <cstdint>

#include "sluice/common/utf8_checker.h"

namespace sluice::structured {

inline bool is_json_digit(std::uint8_t byte) { return byte >= '0' && byte <= '9'; }
inline bool is_json_hex(std::uint8_t byte) {
  return is_json_digit(byte) || (byte >= 'a' && byte <= 'f') || (byte >= 'A' && byte <= 'F');
}
inline bool is_json_whitespace(std::uint8_t byte) {
  return byte == ' ' || byte == '\t' || byte == '\n' || byte == '\r';
}

// A string escape, after its backslash: one of " \\ / b f n r t, or u and four
// hex digits.
class EscapeLexer {
 public:
  void begin() { hex_left_ = kAwaitingLetter; }
  // false if the byte cannot come here.
  bool feed(std::uint8_t byte) {
    if (hex_left_ == kAwaitingLetter) {
      if (byte == 'u') {
        hex_left_ = 4;
        return true;
      }
      if (byte != '"' && byte != '\\' && byte != '/' && byte != 'b' && byte != 'f' && byte != 'n' && byte != 'r' &&
          byte != 't')
        return false;
      hex_left_ = 0;
      return true;
    }
    if (!is_json_hex(byte)) return false;
    --hex_left_;
    return true;
  }
  // The escape is whole: the string goes on.
  bool done() const { return hex_left_ == 0; }

 private:
  static constexpr std::uint8_t kAwaitingLetter = 0xFF;
  std::uint8_t hex_left_ = 0;  // \uXXXX digits still owed, or kAwaitingLetter
};

// A JSON number (RFC 8259: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?),
// optionally an integer only (no fraction or exponent).
class NumberLexer {
 public:
  // `first` is the number's first byte, '-' or a digit (the caller checked).
  void begin(std::uint8_t first, bool integer_only = false) {
    part_ = first == '-' ? Part::kMinus : first == '0' ? Part::kZero : Part::kInteger;
    integer_only_ = integer_only;
  }
  // false if the byte cannot continue the number (it may still end it: can_end()).
  bool feed(std::uint8_t byte) {
    switch (part_) {
      case Part::kMinus:
        if (!is_json_digit(byte)) return false;
        part_ = byte == '0' ? Part::kZero : Part::kInteger;
        return true;
      case Part::kZero:
      case Part::kInteger:
        if (part_ == Part::kInteger && is_json_digit(byte)) return true;
        if (integer_only_) return false;
        if (byte == '.') {
          part_ = Part::kDot;
          return true;
        }
        if (byte == 'e' || byte == 'E') {
          part_ = Part::kExp;
          return true;
        }
        return false;
      case Part::kDot:
        if (!is_json_digit(byte)) return false;
        part_ = Part::kFraction;
        return true;
      case Part::kFraction:
        if (is_json_digit(byte)) return true;
        if (byte == 'e' || byte == 'E') {
          part_ = Part::kExp;
          return true;
        }
        return false;
      case Part::kExp:
        if (byte == '+' || byte == '-') {
          part_ = Part::kExpSign;
          return true;
        }
        [[fallthrough]];
      case Part::kExpSign:
        if (!is_json_digit(byte)) return false;
        part_ = Part::kExpDigits;
        return true;
      case Part::kExpDigits:
        return is_json_digit(byte);
    }
    return false;
  }
  // What was fed so far is a whole number.
  bool can_end() const {
    return part_ == Part::kZero || part_ == Part::kInteger || part_ == Part::kFraction || part_ == Part::kExpDigits;
  }

 private:
  enum class Part : std::uint8_t {
    kMinus,      // "-": a digit must follow
    kZero,       // a leading 0: '.', 'e' or the end
    kInteger,    // 1-9 then digits
    kDot,        // "x.": a digit must follow
    kFraction,   // digits after the dot
    kExp,        // after e/E: sign or digit
    kExpSign,    // after the sign: a digit
    kExpDigits,  // digits of the exponent
  };
  Part part_ = Part::kMinus;
  bool integer_only_ = false;
};

}  // namespace sluice::structured
