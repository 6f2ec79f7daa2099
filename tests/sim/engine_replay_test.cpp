// sim::replay: requests reach the engine at their arrival on the virtual
// clock, idle gaps are skipped, rejections keep the engine's reason, the step
// bound is honoured. A cost model simple enough to solve the timelines by hand.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "sluice/engine/engine.h"
#include "sluice/sim/engine_replay.h"
#include "sluice/sim/sim_backend.h"

namespace sluice::sim {
namespace {

constexpr std::int32_t kVocabSize = 1000;
constexpr std::int32_t kMaxModelLen = 4096;

// 1 ms per step + 0.5 ms per token, whatever the position (exact in binary,
// so the hand arithmetic below is exact too).
class LinearCost final : public CostModel {
 public:
  double predict_step_ms(const StepShape& shape) const override { return 1.0 + 0.5 * shape.num_tokens(); }
};

std::unique_ptr<Engine> make_engine() {
  auto cost = std::make_shared<const LinearCost>();
  BackendInfo info;
  info.block_size_tokens = 16;
  info.num_kv_blocks = 1000;
  info.max_model_len_tokens = kMaxModelLen;
  EngineConfig config;
  config.max_step_ms = 50.0;
  config.clock = ClockMode::kVirtual;
  return std::make_unique<Engine>(std::make_unique<SimBackend>(cost, info, SimTokenOptions{.vocab_size = kVocabSize}),
                                  cost, config);
}

TimedRequest request(const std::string& id, double arrival_ms, std::int32_t num_prompt_tokens,
                     std::int32_t max_tokens) {
  TimedRequest r{.arrival_ms = arrival_ms};
  r.request.request_id = id;
  r.request.prompt_token_ids = synthetic_tokens(std::hash<std::string>{}(id), num_prompt_tokens, kVocabSize);
  r.request.max_tokens = max_tokens;
  r.request.ignore_eos = true;
  return r;
}

TEST(EngineReplay, SubmitsAtArrivalAndSkipsIdleGaps) {
  auto engine = make_engine();
  // "a" at 100 ms: its 8-token prompt in one step (1 + 0.5 * 8 = 5 ms), first
  // token at 105; two decodes of 1.5 ms each. The engine then idles until "b"
  // arrives at 500 ms; same shape.
  const ReplayOutcome out =
      replay(*engine, {request("b", 500.0, 8, 3), request("a", 100.0, 8, 3)}, /*max_steps=*/100);
  EXPECT_TRUE(out.drained);
  EXPECT_EQ(out.num_rejected(), 0);
  ASSERT_EQ(out.timelines.size(), 2u);
  const RequestTimeline& a = out.timelines.at("a");
  EXPECT_DOUBLE_EQ(a.arrival_ms, 100.0);
  EXPECT_DOUBLE_EQ(*a.first_token_ms, 105.0);
  EXPECT_EQ(a.token_ms, (std::vector<double>{105.0, 106.5, 108.0}));
  EXPECT_DOUBLE_EQ(*a.finish_ms, 108.0);
  const RequestTimeline& b = out.timelines.at("b");
  EXPECT_DOUBLE_EQ(b.arrival_ms, 500.0);
  EXPECT_EQ(b.token_ms, (std::vector<double>{505.0, 506.5, 508.0}));
  EXPECT_DOUBLE_EQ(max_token_gap_ms(b), 1.5);
  EXPECT_EQ(out.stats.num_steps, 6);
  EXPECT_DOUBLE_EQ(out.max_step_ms, 5.0);
  EXPECT_DOUBLE_EQ(out.stats.now_ms, 508.0);
}

TEST(EngineReplay, KeepsTheEnginesReasonForEachRejection) {
  auto engine = make_engine();
  const ReplayOutcome out = replay(
      *engine, {request("ok", 0.0, 8, 2), request("too-long", 1.0, kMaxModelLen, 2), request("late", 2.0, 8, 2)},
      /*max_steps=*/100);
  EXPECT_TRUE(out.drained);
  ASSERT_EQ(out.num_rejected(), 1);
  EXPECT_EQ(out.rejections[0].index, 1u);
  EXPECT_EQ(out.rejections[0].request_id, "too-long");
  EXPECT_NE(out.rejections[0].message.find("maximum context length"), std::string::npos) << out.rejections[0].message;
  EXPECT_EQ(out.timelines.size(), 2u);
  EXPECT_TRUE(out.timelines.contains("ok"));
  EXPECT_TRUE(out.timelines.contains("late"));
}

TEST(EngineReplay, StopsAtTheStepBound) {
  auto engine = make_engine();
  const ReplayOutcome out = replay(*engine, {request("a", 0.0, 8, 5)}, /*max_steps=*/3);
  EXPECT_FALSE(out.drained);
  EXPECT_EQ(out.stats.num_steps, 3);
  EXPECT_TRUE(out.timelines.empty());  // still running
  EXPECT_TRUE(engine->has_work());
}

TEST(EngineReplay, BuildsEachRequestWhenTheClockReachesItsArrival) {
  auto engine = make_engine();
  const std::vector<double> arrival_ms = {0.0, 0.0, 3.0, 250.0};
  std::vector<double> built_at_ms;
  const auto make_request = [&](std::size_t i) {
    built_at_ms.push_back(engine->now_ms());
    return request("r" + std::to_string(i), arrival_ms[i], 4, 2).request;
  };
  const ReplayOutcome out = replay(*engine, arrival_ms, make_request, /*max_steps=*/100);
  EXPECT_TRUE(out.drained);
  ASSERT_EQ(built_at_ms.size(), arrival_ms.size());
  for (std::size_t i = 0; i < arrival_ms.size(); ++i) {
    EXPECT_GE(built_at_ms[i], arrival_ms[i]) << i;
    // Built at the first step boundary at or after the arrival: the steps
    // here are at most 1 + 0.5 * 8 = 5 ms long.
    EXPECT_LT(built_at_ms[i], arrival_ms[i] + 5.0) << i;
    EXPECT_DOUBLE_EQ(out.timelines.at("r" + std::to_string(i)).arrival_ms, built_at_ms[i]) << i;
  }
  EXPECT_DOUBLE_EQ(built_at_ms[3], 250.0);  // after an idle gap, exactly on time
}

TEST(SyntheticTokens, DeterministicInTheVocabularyAndDistinctPerId) {
  const auto a = synthetic_tokens(7, 64, kVocabSize);
  EXPECT_EQ(a, synthetic_tokens(7, 64, kVocabSize));
  ASSERT_EQ(a.size(), 64u);
  for (TokenId t : a) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, kVocabSize);
  }
  EXPECT_GT(std::set<TokenId>(a.begin(), a.end()).size(), 32u);  // not a constant run
  const auto b = synthetic_tokens(8, 64, kVocabSize);
  // Different ids share no first block, so no prefix-cache hit between them.
  EXPECT_NE(std::vector<TokenId>(a.begin(), a.begin() + 16), std::vector<TokenId>(b.begin(), b.begin() + 16));
}

}  // namespace
}  // namespace sluice::sim
