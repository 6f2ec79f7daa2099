// Configuration and request builders shared by the engine tests.
#pragma once

#include <gtest/gtest.h>

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

// What one request generated: its tokens, and each token's log-probability
// followed by its top alternatives' (exact: equal logits give equal floats).
struct Generated {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  bool operator==(const Generated&) const = default;
};

// Runs the prompts one after another, each to its end (invariants checked
// every step), and returns the last one's output; every request must end by length.
inline Generated run_one_after_another(Engine& engine, const std::vector<std::vector<TokenId>>& prompts,
                                       std::int32_t max_tokens, std::int32_t num_top_logprobs,
                                       bool ignore_eos = false) {
  Generated last;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest r = request("r" + std::to_string(i), prompts[i], max_tokens);
    r.sampling.num_top_logprobs = num_top_logprobs;
    r.ignore_eos = ignore_eos;
    auto s = engine.submit(std::move(r));
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (!s.ok()) return last;
    for (int step = 0; step < 2000 && engine.has_work(); ++step) {
      engine.step();
      engine.check_invariants();
    }
    last = {};
    while (auto o = (*s)->poll()) {
      for (const GeneratedToken& t : o->tokens) {
        last.tokens.push_back(t.token);
        last.logprobs.push_back(t.logprob);
        for (const TokenLogprob& top : t.top_logprobs) last.logprobs.push_back(top.logprob);
      }
      EXPECT_TRUE(!o->finished() || o->finish_reason == FinishReason::kLength) << o->error_message;
    }
  }
  return last;
}

}  // namespace sluice::testing
