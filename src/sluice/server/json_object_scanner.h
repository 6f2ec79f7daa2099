// Where a JSON object that opens at a text's first byte closes, found while
// the text streams in (llama3_json tool calls have no end marker: the call ends
// with its object). Braces are counted outside strings, escapes skipped; the
// object is not validated here (nlohmann parses it once it is whole).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace sluice::server {

class JsonObjectScanner {
 public:
  // Reads the bytes of `text` not seen by earlier calls (the text only grows
  // between calls, its prefix unchanged). Returns the object's length in bytes
  // once its closing brace is seen.
  std::optional<std::size_t> scan(std::string_view text);
  bool started() const { return num_scanned_bytes_ > 0; }
  void reset() { *this = JsonObjectScanner{}; }

 private:
  std::size_t num_scanned_bytes_ = 0;
  int depth_ = 0;  // open braces outside strings
  bool in_string_ = false;
  bool escaped_ = false;  // the previous byte in a string was a backslash
};

}  // namespace sluice::server
