#include "sluice/sched/decode_lane_bound.h"

#include <gtest/gtest.h>

#include "sluice/sched/token_count_cost_model.h"

namespace sluice {
namespace {

// One decode row reads 8 ms of weights, and KV at kv_ms_per_token per token of context.
class KvPerTokenCostModel final : public CostModel {
 public:
  explicit KvPerTokenCostModel(double kv_ms_per_token) : kv_ms_per_token_(kv_ms_per_token) {}
  double predict_step_ms(const StepShape& shape) const override { return predict_terms(shape).total_ms(); }
  CostTerms predict_terms(const StepShape& shape) const override {
    CostTerms terms{.gemm_memory_ms = 8.0};
    for (const StepShape::Sequence& s : shape.sequences)
      terms.attention_memory_ms += kv_ms_per_token_ * (s.num_computed_tokens + s.num_new_tokens);
    return terms;
  }

 private:
  double kv_ms_per_token_;
};

// A quarter of the weights' 8 ms is 2 ms of KV: 2,048 tokens at 1/1024 ms each.
TEST(DecodeLaneBound, TheLongestContextWhoseKvReadIsAQuarterOfTheWeights) {
  EXPECT_EQ(auto_decode_lane_max_context(KvPerTokenCostModel(1.0 / 1024), 131072), 2048);
  EXPECT_EQ(auto_decode_lane_max_context(KvPerTokenCostModel(1.0 / 2048), 131072), 4096);
}

TEST(DecodeLaneBound, NoBoundBelowTheModelsLength) {
  EXPECT_EQ(auto_decode_lane_max_context(KvPerTokenCostModel(1.0 / 1024), 1500), 1500) << "KV cheap at every length";
  EXPECT_EQ(auto_decode_lane_max_context(TokenCountCostModel(), 131072), 131072) << "a model that prices no KV";
}

}  // namespace
}  // namespace sluice
