#include "sluice/server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace sluice::server {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings) : stop_strings_(std::move(stop_strings)) {
  std::erase_if(stop_strings_, [](const std::string& s) { return s.empty(); });
  for (const std::string& s : stop_strings_) max_stop_bytes_ = std::max(max_stop_bytes_, s.size());
}

StopMatcher::Step StopMatcher::feed(std::string_view piece) {
  Step step;
  if (stopped_) return step;
  if (stop_strings_.empty()) {
    step.text = std::string(piece);
    return step;
  }
  std::string text = std::move(held_);
  held_.clear();
  // The held tail is a proper prefix of a stop string, so any match that ends
  // in the new piece starts inside held + piece.
  text.append(piece);
  std::size_t first = std::string::npos;
  for (const std::string& s : stop_strings_) first = std::min(first, text.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    step.stopped = true;
    step.text = text.substr(0, first);
    return step;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  std::size_t keep = 0;
  const std::size_t max_keep = std::min(text.size(), max_stop_bytes_ - 1);
  for (std::size_t len = max_keep; len > 0 && keep == 0; --len) {
    const std::string_view tail = std::string_view(text).substr(text.size() - len);
    for (const std::string& s : stop_strings_) {
      if (s.size() > len && std::string_view(s).substr(0, len) == tail) {
        keep = len;
        break;
      }
    }
  }
  held_ = text.substr(text.size() - keep);
  text.resize(text.size() - keep);
  step.text = std::move(text);
  return step;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(held_, {});
}

}  // namespace sluice::server
