// How one sequence's next token is chosen. Validated at the API boundary;
// backends trust these ranges.
#pragma once

#include <cstdint>

#include "sluice/common/result.h"

namespace sluice {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  std::int32_t top_k = 0;    // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // 1 = off
  // Sampling is a pure function of (seed, index of the generated token, logits),
  // so a seeded request is reproducible whatever else shares its batches.
  std::uint64_t seed = 0;
  std::int32_t num_top_logprobs = 0;  // 0 = none; the chosen token's logprob is always returned

  bool is_greedy() const { return temperature <= 0.0f; }
  // Range checks; the message names the field as the OpenAI API spells it.
  Status validate() const;
  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

}  // namespace sluice
