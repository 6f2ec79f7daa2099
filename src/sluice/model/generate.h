// Single-sequence generation straight on a Backend, without the engine: the
// reference that `sluice generate`, the goldens and the engine tests compare to.
#pragma once

#include <optional>
#include <vector>

#include "sluice/backend/backend.h"

namespace sluice {

struct GenerateOptions {
  std::int32_t max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<TokenId> stop_token_ids;  // generation ends after emitting one of these
  std::int32_t prefill_chunk_tokens = 0;  // 0 = the whole prompt in one step
  bool return_logits = false;             // keep the logits of every sampled position
};

struct GenerateResult {
  std::vector<TokenId> tokens;             // generated tokens only
  std::vector<float> logprobs;             // of each generated token
  std::vector<std::vector<float>> logits;  // per generated token, if asked
};

Result<GenerateResult> generate_sequence(Backend& backend, const std::vector<TokenId>& prompt,
                                         const GenerateOptions& options);

}  // namespace sluice
