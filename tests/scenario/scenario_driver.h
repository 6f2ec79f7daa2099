// The scenarios' setup (DeepSeek-V4.1-Flash on 8xH200 on the sim backend),
// their replay through the engine (sim/engine_replay.h), and the measurements
// they assert on, computed from the engine's request timelines.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/engine/engine.h"
#include "sluice/sim/engine_replay.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/parallelism.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/sim_backend.h"

namespace sluice::scenario {

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

// The scenarios' prompts draw their token ids from this vocabulary.
constexpr std::int32_t kVocabSize = 32000;

// The workload through the engine on its virtual clock; fails the test if
// anything is left when the step bound runs out.
inline sim::ReplayOutcome play(Engine& engine, std::vector<sim::TimedRequest> workload,
                               std::int64_t max_steps = 2'000'000) {
  sim::ReplayOutcome outcome = sim::replay(engine, std::move(workload), max_steps);
  EXPECT_TRUE(outcome.drained) << "workload did not finish within " << max_steps << " steps";
  return outcome;
}

inline double ttft_ms(const RequestTimeline& t) { return *t.first_token_ms - t.arrival_ms; }

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
