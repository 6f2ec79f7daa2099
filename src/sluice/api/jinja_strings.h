// Python str semantics on UTF-8 bytes: templates index, slice, strip and split by
// code point, and str.strip()/split() without arguments use Unicode whitespace.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::jinja {

// Decodes UTF-8 into code points; invalid bytes decode as U+FFFD-free raw values
// 0xDC80+byte (Python's surrogateescape) so that re-encoding round-trips.
std::vector<char32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(const std::vector<char32_t>& cps, std::size_t begin, std::size_t end);
std::size_t utf8_length(std::string_view s);  // in code points
bool is_ascii(std::string_view s);

bool is_python_space(char32_t cp);  // str.isspace()

// str.strip / lstrip / rstrip; `chars` null = whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit) / rsplit; `sep` null = runs of whitespace.
std::vector<std::string> py_split(std::string_view s, const std::string* sep,
                                  std::int64_t maxsplit, bool from_right);
std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement,
                       std::int64_t count);
std::int64_t py_count(std::string_view s, std::string_view sub);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);

}  // namespace sluice::jinja
