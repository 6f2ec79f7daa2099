#include "sluice/tokenizer/byte_level.h"

#include "sluice/tokenizer/utf8.h"

namespace sluice::tokenizer_detail {

const ByteLevelMap& ByteLevelMap::get() {
  static const ByteLevelMap map = [] {
    ByteLevelMap m;
    // Printable Latin-1 bytes stand for themselves; the other 68 byte values
    // take the code points 256, 257, ... in byte order.
    const auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      m.code_point_of_byte[static_cast<std::size_t>(b)] =
          printable(b) ? static_cast<char32_t>(b) : next++;
    }
    m.byte_of_code_point.fill(-1);
    for (std::size_t b = 0; b < 256; ++b) {
      append_code_point(m.code_point_of_byte[b], m.utf8_of_byte[b]);
      m.byte_of_code_point[m.code_point_of_byte[b]] = static_cast<std::int16_t>(b);
    }
    return m;
  }();
  return map;
}

std::optional<std::uint8_t> ByteLevelMap::byte_of(char32_t cp) const {
  if (cp >= byte_of_code_point.size() || byte_of_code_point[cp] < 0) return std::nullopt;
  return static_cast<std::uint8_t>(byte_of_code_point[cp]);
}

void ByteLevelMap::append_encoded(std::string_view bytes, std::string& out) const {
  for (const char c : bytes) out += utf8_of_byte[static_cast<unsigned char>(c)];
}

}  // namespace sluice::tokenizer_detail
