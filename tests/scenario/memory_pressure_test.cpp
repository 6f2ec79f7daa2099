// Scenario 3, memory pressure: 40 requests whose prompts and outputs need
// several times the KV cache arrive within 5 s. Admission (whole prompt, with a
// reserve) and preemption by recompute must keep every request progressing
// and lose none: all finish by length, no block stays referenced, and no
// request is preempted more than once (docs/benchmarks.md). With a host KV
// tier the same burst swaps its victims out instead (store + load is cheaper
// than recomputing thousands of tokens): the same guarantees, and fewer
// prompt tokens recomputed than by the run without one.
#include <gtest/gtest.h>

#include <cstdio>

#include "scenario_driver.h"
#include "sluice/common/rng.h"

namespace sluice::scenario {
namespace {

constexpr std::int32_t kMaxModelLen = 1 << 17;
constexpr std::int32_t kKvCapacityTokens = 160 * 1024;
constexpr std::int32_t kBlockTokens = 16;

std::vector<sim::TimedRequest> pressure_workload(std::int64_t* demand_tokens) {
  SplitMix64 rng(2026);
  std::vector<sim::TimedRequest> out;
  *demand_tokens = 0;
  for (int i = 0; i < 40; ++i) {
    sim::TimedRequest r{.arrival_ms = 5000.0 * rng.uniform()};
    const auto prompt = static_cast<std::int32_t>(2000 + rng.next() % 18000);
    char name[16];  // (not "p" + std::to_string: a g++ 12 -Wrestrict false positive at -O3)
    std::snprintf(name, sizeof(name), "p%d", i);
    r.request.request_id = name;
    r.request.prompt_token_ids = sim::synthetic_tokens(500 + static_cast<std::uint64_t>(i), prompt, kVocabSize);
    const auto max_tokens = static_cast<std::int32_t>(1000 + rng.next() % 5000);
    r.request.max_tokens = max_tokens;
    r.request.ignore_eos = true;
    *demand_tokens += prompt + max_tokens;
    out.push_back(std::move(r));
  }
  return out;
}

sim::ReplayOutcome run_pressure(std::int64_t kv_offloading_bytes) {
  std::int64_t demand_tokens = 0;
  std::vector<sim::TimedRequest> workload = pressure_workload(&demand_tokens);
  EXPECT_GT(demand_tokens, 3 * static_cast<std::int64_t>(kKvCapacityTokens)) << "the scenario must oversubscribe KV";
  SimSetup setup = deepseek_8xh200(kMaxModelLen, kKvCapacityTokens / kBlockTokens);
  EngineConfig config;
  config.max_step_ms = 50.0;
  config.max_model_len_tokens = kMaxModelLen;
  config.clock = ClockMode::kVirtual;
  config.kv_offloading_bytes = kv_offloading_bytes;
  Engine engine(std::move(setup.backend), setup.cost_model, config);
  return play(engine, std::move(workload));
}

TEST(MemoryPressure, EveryRequestProgressesAndFinishes) {
  std::int64_t demand_tokens = 0;
  pressure_workload(&demand_tokens);
  const sim::ReplayOutcome run = run_pressure(0);

  EXPECT_EQ(run.num_rejected(), 0);
  ASSERT_EQ(run.timelines.size(), 40u);
  std::int32_t most_preemptions = 0;
  double worst_ttft = 0.0;
  for (const auto& [id, t] : run.timelines) {
    EXPECT_EQ(t.finish_reason, FinishReason::kLength) << id;
    most_preemptions = std::max(most_preemptions, t.num_preemptions);
    worst_ttft = std::max(worst_ttft, ttft_ms(t));
  }
  std::int64_t longest_stall_windows = 0;
  num_zero_decode_windows(run.timelines, &longest_stall_windows);
  std::printf("[memory pressure] demand %lld tokens vs KV %d: %lld preemptions (most for one request %d), worst TTFT "
              "%.0f ms, makespan %.0f ms, max step %.1f ms\n",
              static_cast<long long>(demand_tokens), kKvCapacityTokens,
              static_cast<long long>(run.stats.num_preemptions), most_preemptions, worst_ttft, run.stats.now_ms,
              run.max_step_ms);
  EXPECT_GT(run.stats.num_preemptions, 0) << "decode growth should have forced preemption";
  EXPECT_LE(most_preemptions, 1) << "a request preempted again after its recompute is not progressing";
  EXPECT_EQ(longest_stall_windows, 0) << "some decode made progress in every second";
  EXPECT_EQ(run.stats.num_free_kv_blocks, run.stats.num_kv_blocks);
  EXPECT_EQ(run.stats.num_requests_finished, 40);
  EXPECT_EQ(run.stats.num_swap_preemptions, 0) << "no host tier, nothing to swap to";
}

TEST(MemoryPressure, PreemptionSwapsToTheHostTierWhenThatIsCheaper) {
  const sim::ReplayOutcome recompute = run_pressure(0);
  const sim::ReplayOutcome swap = run_pressure(64LL << 30);
  std::printf("[memory pressure, host tier] %lld preemptions, %lld swapped (%lld blocks out, %lld loaded back); "
              "prompt tokens computed %lld vs %lld recomputing; makespan %.0f vs %.0f ms\n",
              static_cast<long long>(swap.stats.num_preemptions), static_cast<long long>(swap.stats.num_swap_preemptions),
              static_cast<long long>(swap.stats.host_swapped_out_blocks),
              static_cast<long long>(swap.stats.host_loaded_blocks),
              static_cast<long long>(swap.stats.num_prompt_tokens_computed),
              static_cast<long long>(recompute.stats.num_prompt_tokens_computed), swap.stats.now_ms,
              recompute.stats.now_ms);
  EXPECT_EQ(swap.num_rejected(), 0);
  ASSERT_EQ(swap.timelines.size(), 40u);
  for (const auto& [id, t] : swap.timelines) EXPECT_EQ(t.finish_reason, FinishReason::kLength) << id;
  ASSERT_GT(swap.stats.num_preemptions, 0) << "decode growth should still force preemption";
  EXPECT_GT(swap.stats.num_swap_preemptions, 0);
  EXPECT_GT(swap.stats.host_swapped_out_blocks, 0);
  EXPECT_GT(swap.stats.host_loaded_blocks, 0) << "swapped requests load their blocks back on resume";
  EXPECT_EQ(swap.stats.host_failed_copies, 0);
  // The swapped tokens are loaded, not computed again.
  EXPECT_LT(swap.stats.num_prompt_tokens_computed, recompute.stats.num_prompt_tokens_computed);
  EXPECT_EQ(swap.stats.num_free_kv_blocks, swap.stats.num_kv_blocks) << "blocks leaked";
  EXPECT_EQ(swap.stats.num_kv_copies_in_flight, 0);
}

}  // namespace
}  // namespace sluice::scenario
