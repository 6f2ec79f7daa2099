// Plays a timed workload through the Engine on the sim backend's virtual
// clock: submit each request when the clock reaches its arrival, jump the
// clock over idle gaps, step until everything ended. Also the measurements
// the scenarios assert on, computed from the engine's request timelines.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/backend/sim/hardware.h"
#include "sluice/backend/sim/model_profile.h"
#include "sluice/backend/sim/parallelism.h"
#include "sluice/backend/sim/roofline_cost_model.h"
#include "sluice/backend/sim/sim_backend.h"
#include "sluice/common/rng.h"
#include "sluice/engine/engine.h"

namespace sluice::scenario {

struct TimedRequest {
  double arrival_ms = 0.0;
  EngineRequest request;
};

// DeepSeek-V4.1-Flash on 8xH200, TP 8 with expert parallel: the report's setup.
struct SimSetup {
  std::shared_ptr<const CostModel> cost_model;
  std::unique_ptr<Backend> backend;
};

inline SimSetup deepseek_8xh200(std::int32_t max_model_len_tokens, std::optional<std::int32_t> num_kv_blocks = {},
                                std::int32_t max_num_seqs = 64) {
  const sim::ModelProfile profile = *sim::find_profile("deepseek-v4.1-flash");
  const sim::HardwareSpec hardware = sim::h200();
  const sim::Parallelism parallelism{.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8};
  sim::SimBackendOptions options;
  options.max_model_len_tokens = max_model_len_tokens;
  options.num_kv_blocks_override = num_kv_blocks;
  options.memory.max_num_seqs = max_num_seqs;
  auto backend = sim::make_sim_backend(profile, hardware, parallelism, options);
  EXPECT_TRUE(backend.ok()) << backend.error_message();
  return SimSetup{.cost_model = std::make_shared<sim::RooflineCostModel>(profile, hardware, parallelism),
                  .backend = std::move(backend).value()};
}

// Deterministic distinct tokens: block `id` of a synthetic corpus.
inline std::vector<TokenId> synthetic_tokens(std::uint64_t id, std::int32_t n, std::int32_t vocab = 32000) {
  std::vector<TokenId> t(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) {
    t[static_cast<std::size_t>(i)] = static_cast<TokenId>(splitmix64(id * 0x100000001ULL + static_cast<std::uint64_t>(i)) %
                                                          static_cast<std::uint64_t>(vocab));
  }
  return t;
}

struct RunOutcome {
  std::map<std::string, RequestTimeline> timelines;
  EngineStats stats;
  double max_step_ms = 0.0;
  std::int64_t num_rejected = 0;
};

inline RunOutcome play(Engine& engine, std::vector<TimedRequest> workload, std::int64_t max_steps = 2'000'000) {
  std::stable_sort(workload.begin(), workload.end(),
                   [](const TimedRequest& a, const TimedRequest& b) { return a.arrival_ms < b.arrival_ms; });
  RunOutcome outcome;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::size_t next = 0;
  for (std::int64_t step = 0; step < max_steps; ++step) {
    while (next < workload.size() && workload[next].arrival_ms <= engine.now_ms()) {
      auto s = engine.submit(std::move(workload[next].request));
      if (s.ok()) {
        streams.push_back(*s);
      } else {
        ++outcome.num_rejected;
      }
      ++next;
    }
    if (!engine.has_work()) {
      if (next == workload.size()) break;
      engine.advance_clock_to(workload[next].arrival_ms);
      continue;
    }
    const StepReport report = engine.step();
    outcome.max_step_ms = std::max(outcome.max_step_ms, report.step_ms);
    for (const auto& s : streams) {
      while (s->poll()) {
      }
    }
  }
  EXPECT_FALSE(engine.has_work()) << "workload did not finish within " << max_steps << " steps";
  for (RequestTimeline& t : engine.take_finished_timelines()) outcome.timelines[t.request_id] = std::move(t);
  outcome.stats = engine.stats();
  return outcome;
}

inline double ttft_ms(const RequestTimeline& t) { return *t.first_token_ms - t.arrival_ms; }

// Longest wait between two consecutive tokens of one request.
inline double max_token_gap_ms(const RequestTimeline& t) {
  double gap = 0.0;
  for (std::size_t i = 1; i < t.token_ms.size(); ++i) gap = std::max(gap, t.token_ms[i] - t.token_ms[i - 1]);
  return gap;
}

// Number of 1 s windows in which some request was decoding (between its first
// token and its finish) but no request produced a token.
inline std::int64_t num_zero_decode_windows(const std::map<std::string, RequestTimeline>& timelines,
                                            std::int64_t* longest_run_windows = nullptr) {
  double end_ms = 0.0;
  for (const auto& [id, t] : timelines) end_ms = std::max(end_ms, *t.finish_ms);
  const auto num_windows = static_cast<std::size_t>(std::ceil(end_ms / 1000.0)) + 1;
  std::vector<std::int64_t> tokens(num_windows, 0);
  std::vector<bool> decoding(num_windows, false);
  for (const auto& [id, t] : timelines) {
    // Decode tokens only: a first token ends a prefill, it is not decode throughput.
    for (std::size_t i = 1; i < t.token_ms.size(); ++i) ++tokens[static_cast<std::size_t>(t.token_ms[i] / 1000.0)];
    if (t.token_ms.size() < 2) continue;
    // Decoding during [first token, last token): whole windows strictly inside count.
    for (auto w = static_cast<std::size_t>(t.token_ms.front() / 1000.0) + 1;
         static_cast<double>(w + 1) * 1000.0 <= t.token_ms.back(); ++w) {
      decoding[w] = true;
    }
  }
  std::int64_t n = 0, run = 0, longest = 0;
  for (std::size_t w = 0; w < num_windows; ++w) {
    const bool starved = decoding[w] && tokens[w] == 0;
    n += starved ? 1 : 0;
    run = starved ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  if (longest_run_windows) *longest_run_windows = longest;
  return n;
}

}  // namespace sluice::scenario
