// Checks UTF-8 one byte at a time: multi-byte characters as RFC 3629 has them
// (no overlongs, no surrogates, nothing past U+10FFFF). Shared by the
// tokenizer's decoder, the request-body parser and the structured-output
// acceptors, which feed bytes one by one and copy the state at every branch.
#pragma once

#include <cstdint>

namespace sluice {

class Utf8Checker {
 public:
  // Inside a character whose continuation bytes are still owed.
  bool mid_character() const { return left_ > 0; }
  // A byte >= 0x80, or any byte while mid_character(): false if it cannot come here.
  bool feed(std::uint8_t byte) {
    if (left_ > 0) {
      if (byte < low_ || byte > high_) return false;
      --left_;
      low_ = 0x80;
      high_ = 0xBF;
      return true;
    }
    low_ = 0x80;
    high_ = 0xBF;
    if (byte >= 0xC2 && byte <= 0xDF) {
      left_ = 1;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      left_ = 2;
      if (byte == 0xE0) low_ = 0xA0;
      if (byte == 0xED) high_ = 0x9F;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      left_ = 3;
      if (byte == 0xF0) low_ = 0x90;
      if (byte == 0xF4) high_ = 0x8F;
    } else {
      return false;
    }
    return true;
  }

 private:
  std::uint8_t left_ = 0;    // continuation bytes still owed
  std::uint8_t low_ = 0x80;  // allowed range of the next continuation byte
  std::uint8_t high_ = 0xBF;
};

}  // namespace sluice
