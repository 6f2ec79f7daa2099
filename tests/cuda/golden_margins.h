// Top-2 margins of logits, for the CUDA golden tests' rules on greedy tokens:
// a step is decisive when our margin is wide, and a free run must follow the
// golden tokens while the float32 reference's margins are wide.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "../model/test_models.h"
#include "sluice/model/generate.h"

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

// Free-running greedy generation of 32 tokens on `backend`: the golden tokens
// for at least as many steps as `reference` (the float32 CPU backend, whose
// tokens are the golden ones) has top-2 margins above wide_share * rms, and
// where it leaves them, a step of ours no wider than decisive_margin.
inline void expect_free_run_follows_golden(Backend& reference, Backend& backend, const GoldenCase& c,
                                           const std::string& label, double wide_share, float decisive_margin) {
  auto f32 = generate_sequence(reference, c.prompt, {.max_new_tokens = 32, .return_logits = true});
  ASSERT_TRUE(f32.ok()) << f32.error_message();
  ASSERT_EQ(f32->tokens, c.greedy_tokens) << "the CPU reference has left the goldens";
  auto result = generate_sequence(backend, c.prompt, {.max_new_tokens = 32, .return_logits = true});
  ASSERT_TRUE(result.ok()) << result.error_message();
  ASSERT_EQ(result->logits.size(), result->tokens.size());
  std::size_t same = 0;
  while (same < result->tokens.size() && result->tokens[same] == c.greedy_tokens[same]) ++same;
  const std::size_t bound = num_leading_wide_steps(f32->logits, wide_share);
  std::printf("[ info ] %s prompt of %zu: first %zu of 32 greedy tokens identical (bound %zu)\n", label.c_str(),
              c.prompt.size(), same, bound);
  EXPECT_GE(same, bound);
  if (same < result->tokens.size()) {
    EXPECT_LE(top2_margin(result->logits[same]), decisive_margin) << "left the golden sequence at step " << same;
  }
}

}  // namespace sluice::testing
