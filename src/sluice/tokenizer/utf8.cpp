#include "sluice/tokenizer/utf8.h"

#include "sluice/common/utf8_append.h"
#include "sluice/common/utf8_checker.h"

namespace sluice::tokenizer_detail {
namespace {

// Length of the valid UTF-8 sequence at text[pos], or 0 if the bytes there are
// not a complete valid sequence. `*num_valid_prefix` gets the length of the
// maximal subpart (lead byte plus the continuation bytes that were still
// acceptable): WHATWG replaces that whole subpart with one U+FFFD.
std::size_t valid_sequence_length(std::string_view text, std::size_t pos,
                                  std::size_t* num_valid_prefix) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  *num_valid_prefix = 1;
  if (byte(pos) < 0x80) return 1;
  Utf8Checker utf8;
  if (!utf8.feed(byte(pos))) return 0;
  std::size_t length = 1;
  while (utf8.mid_character()) {
    if (pos + length >= text.size() || !utf8.feed(byte(pos + length))) return 0;
    *num_valid_prefix = ++length;
  }
  return length;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path: 8 bytes at a time.
    while (pos + 8 <= text.size()) {
      std::uint64_t word = 0;
      for (int k = 0; k < 8; ++k) {
        word |= static_cast<std::uint64_t>(static_cast<unsigned char>(text[pos + k])) << (8 * k);
      }
      if (word & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= text.size()) break;
    std::size_t prefix = 0;
    const std::size_t len = valid_sequence_length(text, pos, &prefix);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

void append_utf8_replacing_invalid(std::string_view bytes, std::string& out) {
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    std::size_t prefix = 0;
    const std::size_t len = valid_sequence_length(bytes, pos, &prefix);
    if (len == 0) {
      out.append(kReplacementChar);
      pos += prefix;
    } else {
      out.append(bytes.substr(pos, len));
      pos += len;
    }
  }
}

std::string_view sanitize_utf8(std::string_view text, std::string& storage) {
  if (is_valid_utf8(text)) return text;
  storage.clear();
  append_utf8_replacing_invalid(text, storage);
  return storage;
}

char32_t next_code_point(std::string_view text, std::size_t& pos) {
  const auto byte = [&](std::size_t i) -> char32_t {
    return i < text.size() ? static_cast<unsigned char>(text[i]) : 0x80;
  };
  const char32_t lead = byte(pos);
  if (lead < 0x80) {
    pos += 1;
    return lead;
  }
  if (lead < 0xE0) {
    const char32_t cp = ((lead & 0x1F) << 6) | (byte(pos + 1) & 0x3F);
    pos += 2;
    return cp;
  }
  if (lead < 0xF0) {
    const char32_t cp = ((lead & 0x0F) << 12) | ((byte(pos + 1) & 0x3F) << 6) | (byte(pos + 2) & 0x3F);
    pos += 3;
    return cp;
  }
  const char32_t cp = ((lead & 0x07) << 18) | ((byte(pos + 1) & 0x3F) << 12) |
                      ((byte(pos + 2) & 0x3F) << 6) | (byte(pos + 3) & 0x3F);
  pos += 4;
  return cp;
}

void append_code_point(char32_t cp, std::string& out) { append_utf8(out, cp); }

bool is_js_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20:
    case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F:
    case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string_view js_trim_start(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t next = pos;
    if (!is_js_whitespace(next_code_point(text, next))) break;
    pos = next;
  }
  return text.substr(pos);
}

std::string_view js_trim_end(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    std::size_t pos = start;
    if (!is_js_whitespace(next_code_point(text, pos))) break;
    end = start;
  }
  return text.substr(0, end);
}

}  // namespace sluice::tokenizer_detail
