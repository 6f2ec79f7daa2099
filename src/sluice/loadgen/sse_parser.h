// Incremental Server-Sent Events parser: bytes go in as they arrive from the
// socket (split anywhere, even inside "\r\n"), complete events come out. An
// OpenAI stream uses only `data:` fields; comments (": keep-alive") and other
// fields are skipped, as the SSE specification says.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sluice::loadgen {

class SseParser {
 public:
  // The data of every event that `bytes` completes, in order. An event with
  // several data lines yields them joined by '\n'; an event with no data line
  // yields nothing.
  std::vector<std::string> feed(std::string_view bytes);

 private:
  void end_line(std::vector<std::string>& events);

  std::string line_;           // the current line, without its terminator
  std::string data_;           // data lines of the current event so far
  bool has_data_ = false;
  bool last_was_cr_ = false;   // a '\r' ended the last line; a following '\n' belongs to it
};

}  // namespace sluice::loadgen
