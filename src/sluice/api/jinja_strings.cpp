#include "sluice/api/jinja_strings.h"

#include <algorithm>

#include "sluice/common/utf8_append.h"

namespace sluice::jinja {

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int num_bytes = 0;
    char32_t cp = 0;
    if (b0 < 0x80) {
      num_bytes = 1;
      cp = b0;
    } else if ((b0 & 0xE0) == 0xC0) {
      num_bytes = 2;
      cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
      num_bytes = 3;
      cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
      num_bytes = 4;
      cp = b0 & 0x07;
    }
    bool valid = num_bytes > 0 && i + static_cast<std::size_t>(num_bytes) <= s.size();
    for (int k = 1; valid && k < num_bytes; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((b & 0xC0) != 0x80) valid = false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (!valid) {
      out.push_back(0xDC00 + b0);  // surrogateescape: re-encodes to the same byte
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<std::size_t>(num_bytes);
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // a surrogate-escaped raw byte goes back out as that byte
    out.push_back(static_cast<char>(cp - 0xDC00));
    return;
  }
  append_utf8(out, cp);
}

std::string utf8_encode(const std::vector<char32_t>& cps, std::size_t begin, std::size_t end) {
  std::string out;
  for (std::size_t i = begin; i < end; ++i) utf8_append(out, cps[i]);
  return out;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::size_t utf8_length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return utf8_decode(s).size();
}

bool is_python_space(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<char32_t> cps = utf8_decode(s);
  std::vector<char32_t> strip_set;
  if (chars != nullptr) strip_set = utf8_decode(*chars);
  auto strippable = [&](char32_t cp) {
    if (chars == nullptr) return is_python_space(cp);
    return std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end();
  };
  std::size_t begin = 0;
  std::size_t end = cps.size();
  if (left) {
    while (begin < end && strippable(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cps[end - 1])) --end;
  }
  return utf8_encode(cps, begin, end);
}

namespace {

std::vector<std::string> split_whitespace(std::string_view s, std::int64_t maxsplit,
                                          bool from_right) {
  std::vector<char32_t> cps = utf8_decode(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  std::vector<std::string> parts;
  std::size_t i = 0;
  const std::size_t n = cps.size();
  std::int64_t num_splits = 0;
  while (i < n) {
    while (i < n && is_python_space(cps[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && num_splits == maxsplit) {
      std::size_t end = n;
      while (end > i && is_python_space(cps[end - 1])) --end;
      std::vector<char32_t> rest(cps.begin() + static_cast<std::ptrdiff_t>(i),
                                 cps.begin() + static_cast<std::ptrdiff_t>(end));
      if (from_right) std::reverse(rest.begin(), rest.end());
      parts.push_back(utf8_encode(rest, 0, rest.size()));
      break;
    }
    const std::size_t start = i;
    while (i < n && !is_python_space(cps[i])) ++i;
    std::vector<char32_t> word(cps.begin() + static_cast<std::ptrdiff_t>(start),
                               cps.begin() + static_cast<std::ptrdiff_t>(i));
    if (from_right) std::reverse(word.begin(), word.end());
    parts.push_back(utf8_encode(word, 0, word.size()));
    ++num_splits;
  }
  if (from_right) std::reverse(parts.begin(), parts.end());
  return parts;
}

}  // namespace

std::vector<std::string> py_split(std::string_view s, const std::string* sep,
                                  std::int64_t maxsplit, bool from_right) {
  if (sep == nullptr) return split_whitespace(s, maxsplit, from_right);
  std::vector<std::string> parts;
  const std::string_view needle = *sep;
  if (!from_right) {
    std::size_t start = 0;
    std::int64_t num_splits = 0;
    while (maxsplit < 0 || num_splits < maxsplit) {
      const std::size_t pos = s.find(needle, start);
      if (pos == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, pos - start));
      start = pos + needle.size();
      ++num_splits;
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  std::size_t end = s.size();
  std::int64_t num_splits = 0;
  while (maxsplit < 0 || num_splits < maxsplit) {
    if (end < needle.size()) break;
    const std::size_t pos = s.rfind(needle, end - needle.size());
    if (pos == std::string_view::npos) break;
    parts.emplace_back(s.substr(pos + needle.size(), end - pos - needle.size()));
    end = pos;
    ++num_splits;
  }
  parts.emplace_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement,
                       std::int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement between every code point (and at both ends).
    const std::vector<char32_t> cps = utf8_decode(s);
    std::int64_t num_done = 0;
    for (std::size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || num_done < count) {
        out.append(replacement);
        ++num_done;
      }
      if (i < cps.size()) utf8_append(out, cps[i]);
    }
    return out;
  }
  std::size_t start = 0;
  std::int64_t num_done = 0;
  while (count < 0 || num_done < count) {
    const std::size_t pos = s.find(old, start);
    if (pos == std::string_view::npos) break;
    out.append(s.substr(start, pos - start));
    out.append(replacement);
    start = pos + old.size();
    ++num_done;
  }
  out.append(s.substr(start));
  return out;
}

std::int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<std::int64_t>(utf8_length(s)) + 1;
  std::int64_t n = 0;
  std::size_t start = 0;
  while (true) {
    const std::size_t pos = s.find(sub, start);
    if (pos == std::string_view::npos) return n;
    ++n;
    start = pos + sub.size();
  }
}

namespace {

// Simple one-to-one case mappings for the scripts chat content commonly uses:
// ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic.
char32_t to_upper_cp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x138 || c == 0x149) return c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3AC && c <= 0x3AF) return c == 0x3AC ? 0x386 : c - 0x25;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  return c;
}

char32_t to_lower_cp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x130 || c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 0x25;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}

bool is_cased(char32_t c) { return to_upper_cp(c) != c || to_lower_cp(c) != c; }

std::string map_case(std::string_view s, char32_t (*fn)(char32_t)) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) {
    if (fn == &to_upper_cp && c == 0xDF) {
      out += "SS";  // German sharp s has no single-letter capital in Python's upper()
      continue;
    }
    utf8_append(out, fn(c));
  }
  return out;
}

}  // namespace

std::string py_upper(std::string_view s) { return map_case(s, &to_upper_cp); }
std::string py_lower(std::string_view s) { return map_case(s, &to_lower_cp); }

std::string py_capitalize(std::string_view s) {
  const std::vector<char32_t> cps = utf8_decode(s);
  std::string out;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    utf8_append(out, i == 0 ? to_upper_cp(cps[i]) : to_lower_cp(cps[i]));
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : utf8_decode(s)) {
    utf8_append(out, previous_cased ? to_lower_cp(c) : to_upper_cp(c));
    previous_cased = is_cased(c);
  }
  return out;
}

}  // namespace sluice::jinja
