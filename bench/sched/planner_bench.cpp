// The scheduler's own cost per step: plan_step() with 256 running decodes and
// 64 waiting prompts, priced by the DeepSeek-V4.1-Flash / 8xH200 roofline
// model (the binary search on chunk length calls it ~15 times per prefill).
// Target: <= 50 us per step.
#include <benchmark/benchmark.h>

#include <chrono>
#include <thread>

#include "sluice/backend/backend.h"
#include "sluice/backend/batch.h"
#include "sluice/common/rng.h"
#include "sluice/engine/engine.h"
#include "sluice/sched/planner.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/roofline_cost_model.h"

namespace sluice {
namespace {

struct PlannerInput {
  std::vector<SchedRequest> running;
  std::vector<SchedRequest> waiting;
  SchedState state() const {
    return {.running = running, .waiting = waiting, .num_available_blocks = 200000, .num_total_blocks = 400000,
            .block_size_tokens = 16, .now_ms = 60000.0};
  }
};

PlannerInput make_input(std::int32_t num_running, std::int32_t num_waiting) {
  SplitMix64 rng(1);
  PlannerInput in;
  for (std::int32_t i = 0; i < num_running; ++i) {
    const auto len = static_cast<std::int32_t>(1000 + rng.next() % 100000);
    in.running.push_back({.seq_id = static_cast<SequenceId>(i), .num_tokens = len + 1, .num_computed_tokens = len,
                          .num_allocated_blocks = (len + 16) / 16, .arrival_ms = rng.uniform() * 60000.0});
  }
  for (std::int32_t i = 0; i < num_waiting; ++i) {
    const auto len = static_cast<std::int32_t>(1000 + rng.next() % 300000);
    in.waiting.push_back(
        {.seq_id = static_cast<SequenceId>(num_running + i), .num_tokens = len, .arrival_ms = rng.uniform() * 60000.0});
  }
  return in;
}

void BM_PlanStep(benchmark::State& state, SchedulingPolicy policy) {
  const sim::RooflineCostModel cost(*sim::find_profile("deepseek-v4.1-flash"), sim::h200(),
                                    {.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8});
  const PlannerInput in = make_input(static_cast<std::int32_t>(state.range(0)), static_cast<std::int32_t>(state.range(1)));
  const SchedConfig config{.policy = policy, .max_num_seqs = 512, .max_num_batched_tokens = 8192,
                           .max_step_ms = 100.0};
  std::int64_t scheduled = 0;
  for (auto _ : state) {
    const StepPlan plan = plan_step(in.state(), config, cost);
    scheduled += plan.num_tokens();
    benchmark::DoNotOptimize(plan);
  }
  state.counters["tokens_per_step"] = benchmark::Counter(static_cast<double>(scheduled), benchmark::Counter::kAvgIterations);
}

BENCHMARK_CAPTURE(BM_PlanStep, sluice, SchedulingPolicy::kSluice)->Args({256, 64})->Args({64, 8})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlanStep, fcfs, SchedulingPolicy::kFcfs)->Args({256, 64})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlanStep, decode_first_token_budget, SchedulingPolicy::kDecodeFirstTokenBudget)
    ->Args({256, 64})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sluice

// The whole engine step around the planner (prefix probes of the waiting
// requests, block commits, the Batch, postprocessing and streaming) with a
// backend that takes no time: 256 decoding requests, 64 waiting (max_num_seqs
// keeps them out).
namespace sluice {
namespace {

class InstantBackend final : public Backend {
 public:
  InstantBackend() : info_{.name = "instant", .block_size_tokens = 16, .num_kv_blocks = 1 << 20,
                           .vocab_size = 32000, .max_model_len_tokens = 1 << 20} {}
  const BackendInfo& info() const override { return info_; }
  Result<StepOutput> execute(const Batch& batch) override {
    StepOutput out;
    out.sequences.reserve(batch.sequences.size());
    for (const SequenceStep& s : batch.sequences) {
      SequenceOutput o{.seq_id = s.seq_id};
      if (s.sample) o.token = static_cast<TokenId>((s.seq_id * 31 + static_cast<std::uint64_t>(s.end_position())) % 32000);
      out.sequences.push_back(std::move(o));
    }
    out.step_time_ms = 10.0;
    return out;
  }

 private:
  BackendInfo info_;
};

// state.range(0) = 1: the 64 waiting prompts (100k tokens) are fully in the
// prefix cache, so each step's probes walk their whole block chains.
void BM_EngineStep(benchmark::State& state) {
  const bool warm_waiting = state.range(0) != 0;
  EngineConfig config;
  config.max_num_seqs = 256;
  config.max_num_batched_tokens = 1 << 16;
  config.max_step_ms = 1e9;
  config.max_model_len_tokens = 1 << 20;
  config.clock = ClockMode::kVirtual;
  Engine engine(std::make_unique<InstantBackend>(), nullptr, config);
  SplitMix64 rng(3);
  std::vector<std::shared_ptr<RequestStream>> streams;
  auto submit = [&](std::int32_t i, std::int32_t prompt) {
    EngineRequest r;
    r.request_id = std::to_string(i);
    for (std::int32_t k = 0; k < prompt; ++k) r.prompt_token_ids.push_back(static_cast<TokenId>(rng.next() % 32000));
    r.max_tokens = 1 << 19;
    r.ignore_eos = true;
    streams.push_back(engine.submit(std::move(r)).value());
  };
  std::vector<EngineRequest> warm_waiting_requests;
  if (warm_waiting) {
    // One 100k-token prompt, computed once (it takes a running slot while it
    // prefills, then finishes); then 64 requests that share it all.
    std::vector<TokenId> shared;
    for (std::int32_t k = 0; k < 100000; ++k) shared.push_back(static_cast<TokenId>(rng.next() % 32000));
    EngineRequest warm;
    warm.request_id = "warm";
    warm.prompt_token_ids = shared;
    warm.max_tokens = 1;
    streams.push_back(engine.submit(std::move(warm)).value());
    while (engine.stats().num_requests_finished == 0) engine.step();
    for (std::int32_t i = 256; i < 320; ++i) {
      EngineRequest r;
      r.request_id = std::to_string(i);
      r.prompt_token_ids = shared;
      r.prompt_token_ids.push_back(1);
      r.max_tokens = 1;
      warm_waiting_requests.push_back(std::move(r));
    }
  }
  for (std::int32_t i = 0; i < 256; ++i) submit(i, 2000);
  while (engine.stats().num_running < 256 || engine.stats().num_generated_tokens < 256) engine.step();
  if (!warm_waiting) {
    for (std::int32_t i = 256; i < 320; ++i) submit(i, 20000);
  } else {
    for (auto& r : warm_waiting_requests) streams.push_back(engine.submit(std::move(r)).value());
  }
  for (auto _ : state) {
    const StepReport report = engine.step();
    benchmark::DoNotOptimize(report);
    for (std::size_t i = 0; i < 256; ++i) benchmark::DoNotOptimize(streams[i]->poll());
  }
  state.counters["running"] = engine.stats().num_running;
  state.counters["waiting"] = engine.stats().num_waiting;
}

BENCHMARK(BM_EngineStep)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sluice

// Async scheduling against inline: a backend that holds each step for a fixed
// wall time (a GPU step's stand-in; it sleeps, so it takes no core), 256
// decoding requests. Inline, a step costs the backend time + the engine's host
// step; with the engine thread planning step N+1 while the backend runs step
// N, it should cost max(backend, host). range(0): the backend's step in us;
// range(1): 1 = async scheduling.
namespace sluice {
namespace {

class TimedBackend final : public Backend {
 public:
  explicit TimedBackend(std::chrono::microseconds step_time) : step_time_(step_time) {}
  const BackendInfo& info() const override { return instant_.info(); }
  Result<StepOutput> execute(const Batch& batch) override {
    const auto done = std::chrono::steady_clock::now() + step_time_;
    Result<StepOutput> out = instant_.execute(batch);
    std::this_thread::sleep_until(done);
    return out;
  }

 private:
  InstantBackend instant_;
  std::chrono::microseconds step_time_;
};

void BM_EngineStepOverlap(benchmark::State& state) {
  EngineConfig config;
  config.max_num_seqs = 256;
  config.max_num_batched_tokens = 1 << 16;
  config.max_step_ms = 1e9;
  config.max_model_len_tokens = 1 << 20;
  config.async_scheduling = state.range(1) != 0;
  Engine engine(std::make_unique<TimedBackend>(std::chrono::microseconds(state.range(0))), nullptr, config);
  SplitMix64 rng(3);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (std::int32_t i = 0; i < 256; ++i) {
    EngineRequest r;
    r.request_id = std::to_string(i);
    for (std::int32_t k = 0; k < 2000; ++k) r.prompt_token_ids.push_back(static_cast<TokenId>(rng.next() % 32000));
    r.max_tokens = 1 << 19;
    r.ignore_eos = true;
    streams.push_back(engine.submit(std::move(r)).value());
  }
  while (engine.stats().num_running < 256 || engine.stats().num_generated_tokens < 512) engine.step();
  const std::int64_t tokens_before = engine.stats().num_generated_tokens;
  for (auto _ : state) {
    const StepReport report = engine.step();
    benchmark::DoNotOptimize(report);
    for (std::size_t i = 0; i < 256; ++i) benchmark::DoNotOptimize(streams[i]->poll());
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(engine.stats().num_generated_tokens - tokens_before), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_EngineStepOverlap)
    ->ArgsProduct({{500, 2000}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sluice
