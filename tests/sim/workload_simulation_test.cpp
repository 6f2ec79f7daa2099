// The planner's workload run against a cost model simple enough to solve by
// hand, and the workload readers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sluice/backend/sim/workload_simulation.h"

namespace sluice::sim {
namespace {

// 1 ms per step + 0.25 ms per token, whatever the position (exact in binary,
// so the hand arithmetic below is exact too).
class LinearCost final : public CostModel {
 public:
  double predict_step_ms(const StepShape& shape) const override { return 1.0 + 0.25 * shape.num_tokens(); }
};

PlanPolicy policy() {
  return {.max_step_ms = 5.0, .max_num_seqs = 8, .max_num_batched_tokens = 100000,
          .kv_capacity_tokens = 1'000'000, .max_model_len_tokens = 100000};
}

TEST(WorkloadSimulation, OneRequestSolvedByHand) {
  // Chunks are the largest under 5 ms: 1 + 0.25 n <= 5 -> n = 16. A prompt of
  // 40 runs as 16 (5 ms), 16 (5 ms), 8 (3 ms): first token at 13 ms. Then 2
  // decode steps of 1.25 ms each.
  const WorkloadOutcome out = simulate_workload(LinearCost(), {{.arrival_ms = 0, .num_prompt_tokens = 40,
                                                                .num_output_tokens = 3}}, policy());
  ASSERT_EQ(out.requests.size(), 1u);
  const RequestOutcome& r = out.requests[0];
  EXPECT_FALSE(r.rejected);
  EXPECT_DOUBLE_EQ(r.first_token_ms, 13.0);
  EXPECT_DOUBLE_EQ(r.finish_ms, 15.5);
  EXPECT_DOUBLE_EQ(r.max_gap_ms, 1.25);
  EXPECT_DOUBLE_EQ(r.mean_itl_ms(), 1.25);
  EXPECT_EQ(out.num_steps, 5);
  EXPECT_EQ(out.num_output_tokens, 3);
}

TEST(WorkloadSimulation, ShortestPromptFirstAndDecodesShareSteps) {
  // Prompts of 40 and 4 at t = 0. Step 1: the short prompt whole (4) and 12 of
  // the long one (5 ms); the short one's first token at 5 ms. Step 2: its
  // decode (1) + 15 of the long one (5 ms); it finishes at 10 ms. Step 3: the
  // long one's last 13 tokens (4.25 ms): first token at 14.25. Step 4: its
  // decode (1.25 ms).
  const WorkloadOutcome out = simulate_workload(
      LinearCost(),
      {{.arrival_ms = 0, .num_prompt_tokens = 40, .num_output_tokens = 2},
       {.arrival_ms = 0, .num_prompt_tokens = 4, .num_output_tokens = 2}},
      policy());
  EXPECT_DOUBLE_EQ(out.requests[1].first_token_ms, 5.0);
  EXPECT_DOUBLE_EQ(out.requests[1].finish_ms, 10.0);
  EXPECT_DOUBLE_EQ(out.requests[0].first_token_ms, 14.25);
  EXPECT_DOUBLE_EQ(out.requests[0].finish_ms, 15.5);
  EXPECT_DOUBLE_EQ(out.max_step_ms, 5.0);
  EXPECT_EQ(out.num_steps, 4);
}

TEST(WorkloadSimulation, DecodeNeverWaitsLongerThanTheStepTarget) {
  std::vector<WorkloadRequest> workload;
  for (int i = 0; i < 4; ++i) workload.push_back({.arrival_ms = 0, .num_prompt_tokens = 5, .num_output_tokens = 100});
  for (int i = 0; i < 4; ++i) {
    workload.push_back({.arrival_ms = 10.0 * i, .num_prompt_tokens = 200 + 50 * i, .num_output_tokens = 20});
  }
  const WorkloadOutcome out = simulate_workload(LinearCost(), workload, policy());
  for (const auto& r : out.requests) {
    EXPECT_FALSE(r.rejected);
    EXPECT_GT(r.finish_ms, r.first_token_ms);
    EXPECT_LE(r.max_gap_ms, 5.0);
  }
  EXPECT_EQ(out.num_output_tokens, 4 * 100 + 4 * 20);
}

TEST(WorkloadSimulation, RejectsWhatCanNeverFitAndQueuesTheRest) {
  PlanPolicy p = policy();
  p.kv_capacity_tokens = 150;
  p.max_num_seqs = 1;
  const WorkloadOutcome out = simulate_workload(
      LinearCost(),
      {{.arrival_ms = 0, .num_prompt_tokens = 100, .num_output_tokens = 10},
       {.arrival_ms = 0, .num_prompt_tokens = 100, .num_output_tokens = 10},
       {.arrival_ms = 0, .num_prompt_tokens = 200, .num_output_tokens = 10}},
      p);
  EXPECT_FALSE(out.requests[0].rejected);
  EXPECT_FALSE(out.requests[1].rejected);
  EXPECT_TRUE(out.requests[2].rejected);
  // One slot: the second starts after the first finishes.
  EXPECT_GE(out.requests[1].first_token_ms, out.requests[0].finish_ms);
}

TEST(Workload, ReportWorkloadFitsTheContext) {
  const auto full = report_workload(1048576);
  ASSERT_EQ(full.size(), 16u);
  EXPECT_EQ(full[8].num_prompt_tokens, 30000);
  EXPECT_EQ(full.back().num_prompt_tokens, 300000);
  EXPECT_EQ(full.back().num_output_tokens, 8000);
  EXPECT_DOUBLE_EQ(full.back().arrival_ms, 10000);
  for (std::int32_t max_len : {4096, 131072}) {
    for (const auto& r : report_workload(max_len)) {
      EXPECT_GE(r.num_prompt_tokens, 1);
      EXPECT_LE(r.num_prompt_tokens + r.num_output_tokens, max_len);
    }
  }
}

TEST(Workload, ReadsJsonlTraces) {
  const std::string path = std::string(SLUICE_BINARY_DIR) + "/sim_workload_test.jsonl";
  {
    std::ofstream out(path);
    out << R"({"timestamp": 2000, "input_length": 300, "output_length": 20, "hash_ids": [1]})" << "\n\n"
        << R"({"timestamp": 0, "input_length": 100, "output_length": 10})" << "\n"
        << R"({"input_length": 5, "output_length": 1})" << "\n";
  }
  auto all = load_workload_jsonl(path, 0);
  ASSERT_TRUE(all.ok()) << all.error_message();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].num_prompt_tokens, 100);  // sorted by arrival
  EXPECT_EQ((*all)[2].num_prompt_tokens, 300);
  EXPECT_DOUBLE_EQ((*all)[2].arrival_ms, 2000);
  auto first = load_workload_jsonl(path, 1);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->size(), 1u);
  {
    std::ofstream out(path);
    out << R"({"input_length": 100})" << "\n";
  }
  auto bad = load_workload_jsonl(path, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error_message().find("output_length"), std::string::npos) << bad.error_message();
  {
    std::ofstream out(path);
    out << "not json\n";
  }
  EXPECT_FALSE(load_workload_jsonl(path, 0).ok());
  EXPECT_FALSE(load_workload_jsonl(path + ".missing", 0).ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace sluice::sim
