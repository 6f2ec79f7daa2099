#include "sluice/loadgen/sse_parser.h"

namespace sluice::loadgen {

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> events;
  for (char c : bytes) {
    if (c == '\n' && last_was_cr_) {
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = c == '\r';
    if (c == '\r' || c == '\n') {
      end_line(events);
    } else {
      line_ += c;
    }
  }
  return events;
}

void SseParser::end_line(std::vector<std::string>& events) {
  if (line_.empty()) {  // a blank line dispatches the event
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  const std::string_view line = line_;
  if (line.front() != ':') {
    const std::size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
  }
  line_.clear();
}

}  // namespace sluice::loadgen
