// UTF-8 helpers with the exact semantics the reference (JavaScript) has, so
// that ids match: invalid bytes become U+FFFD the way the WHATWG decoder
// (TextDecoder, Buffer.toString) replaces them, and "whitespace" is what
// String.prototype.trim and the regex \s consider whitespace.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::tokenizer_detail {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// True if `text` is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool is_valid_utf8(std::string_view text);

// Appends `bytes` to `out`, replacing each maximal invalid subpart with U+FFFD
// (WHATWG "UTF-8 decode" with replacement).
void append_utf8_replacing_invalid(std::string_view bytes, std::string& out);

// Returns `text` itself if valid, else a repaired copy in `storage` (as above).
std::string_view sanitize_utf8(std::string_view text, std::string& storage);

// Decodes the code point starting at text[pos] (text must be valid UTF-8) and
// advances pos past it.
char32_t next_code_point(std::string_view text, std::size_t& pos);

// Number of bytes of the UTF-8 sequence whose lead byte is `lead` (1 for
// continuation or invalid bytes, so loops always advance).
inline std::size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

void append_code_point(char32_t cp, std::string& out);

// JavaScript's WhiteSpace + LineTerminator (what trim() strips and \s matches).
bool is_js_whitespace(char32_t cp);

// String.prototype.trimStart / trimEnd on UTF-8.
std::string_view js_trim_start(std::string_view text);
std::string_view js_trim_end(std::string_view text);

}  // namespace sluice::tokenizer_detail
