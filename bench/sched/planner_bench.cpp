// The scheduler's own cost per step: plan_step() with 256 running decodes and
// 64 waiting prompts, priced by the DeepSeek-V4.1-Flash / 8xH200 roofline
// model (the binary search on chunk length calls it ~15 times per prefill).
// Target: <= 50 us per step.
#include <benchmark/benchmark.h>

#include "sluice/backend/sim/hardware.h"
#include "sluice/backend/sim/model_profile.h"
#include "sluice/backend/sim/roofline_cost_model.h"
#include "sluice/common/rng.h"
#include "sluice/sched/planner.h"

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
                          .num_allocated_blocks = (len + 16) / 16, .max_num_tokens = len + 4096,
                          .arrival_ms = rng.uniform() * 60000.0});
  }
  for (std::int32_t i = 0; i < num_waiting; ++i) {
    const auto len = static_cast<std::int32_t>(1000 + rng.next() % 300000);
    in.waiting.push_back({.seq_id = static_cast<SequenceId>(num_running + i), .num_tokens = len,
                          .max_num_tokens = len + 4096, .arrival_ms = rng.uniform() * 60000.0});
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
