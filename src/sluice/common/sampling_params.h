// How one sequence's next token is chosen. Validated at the API boundary;
// backends trust these ranges.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/common/result.h"

namespace sluice {

// OpenAI's range for a logit_bias value.
inline constexpr float kMaxLogitBias = 100.0f;

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
  // OpenAI's logit_bias: (token, bias in [-100, 100]) by ascending token, each
  // token once, added to its logit before the penalties (vLLM's order), so it
  // moves the logprobs too. Token ids are checked against the vocabulary where
  // the request is (check_request).
  std::vector<std::pair<TokenId, float>> logit_bias;

  bool is_greedy() const { return temperature <= 0.0f; }
  // Range checks; the message names the field as the OpenAI API spells it.
  Status validate() const;
  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
  // Whatever changes the logits before the draw: the logit bias or a penalty.
  bool adjusts_logits() const { return has_penalties() || !logit_bias.empty(); }
};

}  // namespace sluice
