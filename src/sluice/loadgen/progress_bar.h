// A one-line progress bar on stderr, redrawn in place ("\r"); the caller
// shows it only when stderr is a terminal.
#pragma once

#include <cstddef>

namespace sluice::loadgen {

class ProgressBar {
 public:
  explicit ProgressBar(std::size_t num_total) : num_total_(num_total) {}
  void update(std::size_t num_done, std::size_t num_running, double elapsed_ms);
  void finish();  // ends the line

 private:
  std::size_t num_total_;
};

}  // namespace sluice::loadgen
