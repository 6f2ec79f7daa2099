// A synthetic agent-session workload in the Mooncake trace's shape (hash ids
// of 512-token blocks), for judging eviction on something other than the one
// real trace: many sessions, each starting from one of a few long shared system
// prompts, each turn re-sending the whole history plus the user's message, the
// last answer and tool output; turns follow each other after a tool call's
// seconds, and sometimes after a user's minutes-long absence.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sluice/common/rng.h"

namespace sluice {

struct TraceRequest {
  double arrival_ms = 0.0;
  std::int32_t num_input_tokens = 0;
  std::int32_t num_output_tokens = 0;
  std::vector<std::uint64_t> hash_ids;  // one per 512-token block
};

struct AgentSessionsOptions {
  std::uint64_t seed = 1;
  std::int32_t num_sessions = 1000;
  std::int32_t num_system_prompts = 6;
  double session_rate_per_s = 1.0;        // Poisson session starts
  double mean_turns = 6.0;                // geometric
  double long_gap_probability = 0.15;     // the user walks away between turns
};

inline std::vector<TraceRequest> agent_sessions(const AgentSessionsOptions& o) {
  constexpr std::int32_t kBlockTokens = 512;
  SplitMix64 rng(o.seed);
  const auto between = [&](double lo, double hi) { return lo + (hi - lo) * rng.uniform(); };
  std::uint64_t next_id = 0;
  // System prompts of 4k..16k tokens; sessions pick them with Zipf-like weights.
  std::vector<std::vector<std::uint64_t>> system_prompts;
  for (std::int32_t s = 0; s < o.num_system_prompts; ++s) {
    std::vector<std::uint64_t> ids(static_cast<std::size_t>(between(8, 33)));
    for (std::uint64_t& id : ids) id = next_id++;
    system_prompts.push_back(std::move(ids));
  }
  double harmonic = 0.0;
  for (std::int32_t s = 1; s <= o.num_system_prompts; ++s) harmonic += 1.0 / s;
  std::vector<TraceRequest> out;
  double session_start_ms = 0.0;
  for (std::int32_t session = 0; session < o.num_sessions; ++session) {
    session_start_ms += -std::log(1.0 - rng.uniform()) / o.session_rate_per_s * 1000.0;
    double pick = rng.uniform() * harmonic;
    std::size_t prompt = 0;
    while (prompt + 1 < system_prompts.size() && (pick -= 1.0 / static_cast<double>(prompt + 1)) > 0.0) ++prompt;
    std::vector<std::uint64_t> history = system_prompts[prompt];
    double t_ms = session_start_ms;
    const auto append = [&](std::int32_t num_blocks) {
      for (std::int32_t b = 0; b < num_blocks; ++b) history.push_back(next_id++);
    };
    for (std::int32_t turn = 0; turn < 64; ++turn) {
      if (turn > 0) {
        append(1);  // the last answer
        append(static_cast<std::int32_t>(between(0, 9)));  // tool output
        t_ms += rng.uniform() < o.long_gap_probability ? between(120e3, 1200e3) : between(2e3, 15e3);
      }
      append(static_cast<std::int32_t>(between(1, 3)));  // the user's (or the agent loop's) message
      TraceRequest r;
      r.arrival_ms = t_ms;
      r.num_input_tokens = static_cast<std::int32_t>(history.size()) * kBlockTokens;
      r.num_output_tokens = static_cast<std::int32_t>(between(50, 500));
      r.hash_ids = history;
      out.push_back(std::move(r));
      if (rng.uniform() < 1.0 / o.mean_turns || history.size() > 200) break;
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_ms < b.arrival_ms; });
  return out;
}

}  // namespace sluice
