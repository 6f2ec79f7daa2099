// Configuration and request builders shared by the engine tests.
#pragma once

#include <numeric>
#include <string>
#include <vector>

#include "sluice/engine/engine.h"

namespace sluice::testing {

inline constexpr std::int32_t kBlock = 4;  // KV block size, in tokens, of the engine tests

// Small limits, the virtual clock, no KV reserve: steps the tests can count.
inline EngineConfig small_config(bool async_scheduling = false) {
  EngineConfig c;
  c.async_scheduling = async_scheduling;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.max_step_ms = 1000.0;
  c.kv_reserve_fraction = 0.0;
  c.clock = ClockMode::kVirtual;
  return c;
}

// n consecutive token ids starting at `first`.
inline std::vector<TokenId> tokens_from(std::int32_t n, TokenId first) {
  std::vector<TokenId> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

inline EngineRequest request(std::string id, std::vector<TokenId> prompt, std::int32_t max_tokens) {
  EngineRequest r;
  r.request_id = std::move(id);
  r.prompt_token_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

}  // namespace sluice::testing
