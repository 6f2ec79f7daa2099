#include "sluice/loadgen/progress_bar.h"

#include <cstdio>
#include <string>

namespace sluice::loadgen {

void ProgressBar::update(std::size_t num_done, std::size_t num_running, double elapsed_ms) {
  constexpr std::size_t kWidth = 30;
  const std::size_t filled = num_total_ == 0 ? kWidth : num_done * kWidth / num_total_;
  const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  std::fprintf(stderr, "\r[%s] %zu/%zu done, %zu running, %.1f s ", bar.c_str(), num_done, num_total_, num_running,
               elapsed_ms / 1000.0);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace sluice::loadgen
