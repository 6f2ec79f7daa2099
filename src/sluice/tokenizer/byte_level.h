// The GPT-2 byte <-> unicode map used by byte-level BPE: every byte value is
// shown as a printable code point so vocabularies never contain raw control
// bytes or spaces ("Ġ" is the space byte, "Ċ" the newline byte).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::tokenizer_detail {

struct ByteLevelMap {
  std::array<char32_t, 256> code_point_of_byte{};
  std::array<std::string, 256> utf8_of_byte;  // code_point_of_byte as UTF-8
  std::array<std::int16_t, 256 + 68> byte_of_code_point{};  // -1: not a byte-level code point

  static const ByteLevelMap& get();
  // The byte a code point stands for, if it is one of the 256.
  std::optional<std::uint8_t> byte_of(char32_t cp) const;
  // Maps raw bytes to their byte-level string ("a b" -> "aĠb").
  void append_encoded(std::string_view bytes, std::string& out) const;
};

}  // namespace sluice::tokenizer_detail
