// Top-2 margins of logits, for the CUDA golden tests' rules on greedy tokens:
// a step is decisive when our margin is wide, and a free run must follow the
// golden tokens while the float32 reference's margins are wide.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace sluice::testing {

inline float top2_margin(const std::vector<float>& logits) {
  float a = -INFINITY, b = -INFINITY;
  for (float x : logits) {
    if (x > a) {
      b = a;
      a = x;
    } else if (x > b) {
      b = x;
    }
  }
  return a - b;
}

inline double logits_rms(const std::vector<float>& logits) {
  double sum = 0.0;
  for (float x : logits) sum += double(x) * x;
  return std::sqrt(sum / static_cast<double>(std::max<std::size_t>(logits.size(), 1)));
}

// How many steps from the start have a float32 top-2 margin above share * rms.
inline std::size_t num_leading_wide_steps(const std::vector<std::vector<float>>& f32_logits, double share) {
  std::size_t n = 0;
  while (n < f32_logits.size() && top2_margin(f32_logits[n]) > share * logits_rms(f32_logits[n])) ++n;
  return n;
}

}  // namespace sluice::testing
