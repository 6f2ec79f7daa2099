#include "sluice/server/json_object_scanner.h"

#include "sluice/common/check.h"

namespace sluice::server {

std::optional<std::size_t> JsonObjectScanner::scan(std::string_view text) {
  SLUICE_CHECK_LE(num_scanned_bytes_, text.size());
  for (; num_scanned_bytes_ < text.size(); ++num_scanned_bytes_) {
    const char c = text[num_scanned_bytes_];
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{') {
      ++depth_;
    } else if (c == '}') {
      --depth_;
      if (depth_ <= 0) return ++num_scanned_bytes_;
    }
  }
  return std::nullopt;
}

}  // namespace sluice::server
