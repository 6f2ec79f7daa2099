// StopMatcher: finds stop strings in streamed text that arrives in arbitrary
// pieces (one token's text at a time), so a stop string split across tokens is
// still found, and never lets any part of it reach the client: text that could
// be the start of a stop string is held back until the next piece decides.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sluice::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stop_strings);

  struct Step {
    std::string text;      // safe to send now
    bool stopped = false;  // a stop string ended the output; `text` is what precedes it
  };
  // Feeds the next piece. After a stop, further input is ignored.
  Step feed(std::string_view piece);
  // End of output: whatever was held back (it was not a stop string after all).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_strings_;
  std::string held_;  // tail of the text that is a prefix of some stop string
  std::size_t max_stop_bytes_ = 0;
  bool stopped_ = false;
};

}  // namespace sluice::server
