// The run's clock: milliseconds since the run started, multiplied by the
// server's speed-up (a simulated server that runs S times faster than real
// time is measured on its own time scale).
#pragma once

#include <chrono>

namespace sluice::loadgen {

class RunClock {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RunClock(double server_speedup = 1.0) : start_(Clock::now()), speedup_(server_speedup) {}

  double now_ms() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - start_).count() * speedup_;
  }
  // The real instant at which the server's clock reads `ms`.
  Clock::time_point at(double ms) const {
    return start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms / speedup_));
  }

 private:
  Clock::time_point start_;
  double speedup_;
};

}  // namespace sluice::loadgen
