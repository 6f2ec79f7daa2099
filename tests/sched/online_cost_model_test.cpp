// OnlineCostModel against a "true" cost that differs from the prior by a known
// factor per term: the fit must find the factors, predict the truth, leave
// unexercised terms at the prior, and follow a truth that changes.
#include "sluice/sched/online_cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "sluice/common/rng.h"

namespace sluice {
namespace {

// A prior whose terms each depend on one feature of the shape, like the
// roofline model's: prefill tokens, decode rows, prefill context, decode
// context, and a fixed cost.
class ShapedPrior final : public CostModel {
 public:
  double predict_step_ms(const StepShape& shape) const override { return predict_terms(shape).total_ms(); }
  CostTerms predict_terms(const StepShape& shape) const override {
    CostTerms t{.fixed_ms = 2.0};
    for (const auto& s : shape.sequences) {
      const double n = s.num_new_tokens, ctx = s.num_computed_tokens;
      if (n > 1) {
        t.gemm_compute_ms += 0.01 * n;
        t.attention_compute_ms += 1e-6 * n * (ctx + n / 2);
      } else {
        t.gemm_memory_ms = 10.0;  // the weights are read once per step
        t.attention_memory_ms += 1e-4 * ctx;
      }
    }
    return t;
  }
};

// The truth: the prior's terms times fixed factors.
double true_ms(const CostModel& prior, const StepShape& shape, const OnlineCostModel::Factors& truth) {
  const auto terms = prior.predict_terms(shape).values();
  double ms = 0;
  for (std::size_t i = 0; i < terms.size(); ++i) ms += truth[i] * terms[i];
  return ms;
}

StepShape mixed_step(SplitMix64& rng, bool with_prefill, bool with_decode) {
  StepShape shape;
  if (with_decode) {
    const int rows = 1 + static_cast<int>(rng.uniform() * 32);
    for (int i = 0; i < rows; ++i)
      shape.sequences.push_back({.num_new_tokens = 1, .num_computed_tokens = static_cast<std::int32_t>(rng.uniform() * 60000)});
  }
  if (with_prefill)
    shape.sequences.push_back({.num_new_tokens = 256 + static_cast<std::int32_t>(rng.uniform() * 2048),
                               .num_computed_tokens = static_cast<std::int32_t>(rng.uniform() * 100000)});
  return shape;
}

double relative_error(double got, double want) { return std::fabs(got - want) / want; }

TEST(OnlineCostModel, StartsAtThePrior) {
  auto prior = std::make_shared<ShapedPrior>();
  OnlineCostModel model(prior);
  SplitMix64 rng(1);
  const StepShape shape = mixed_step(rng, true, true);
  EXPECT_DOUBLE_EQ(model.predict_step_ms(shape), prior->predict_step_ms(shape));
  EXPECT_EQ(model.num_observed_steps(), 0);
}

TEST(OnlineCostModel, PredictsTheTruthFromMixedSteps) {
  auto prior = std::make_shared<ShapedPrior>();
  OnlineCostModel model(prior);
  const OnlineCostModel::Factors truth = {0.7, 0.5, 2.5, 1.8, 3.0};
  SplitMix64 rng(2);
  for (int step = 0; step < 40; ++step) {
    const StepShape shape = mixed_step(rng, step % 3 != 0, step % 4 != 1);
    model.observe(shape, true_ms(*prior, shape, truth));
  }
  // The factors are a means: weight reads and fixed costs are both constant
  // per decode step, and small terms carry little information per step, so
  // the pull towards the whole-step ratio keeps them near it. The term that
  // dominates long prefill steps is found; the predictions must be right.
  EXPECT_GT(model.factors()[2], 2.0);
  for (int probe = 0; probe < 20; ++probe) {
    const StepShape shape = mixed_step(rng, probe % 2 == 0, true);
    EXPECT_LT(relative_error(model.predict_step_ms(shape), true_ms(*prior, shape, truth)), 0.03);
  }
}

// A uniform error (a slower GPU) is right within a few steps: the promise that
// a wrong prior cannot mis-size steps for long.
TEST(OnlineCostModel, UniformErrorIsCorrectedWithinAFewSteps) {
  for (double factor : {0.5, 3.0}) {
    auto prior = std::make_shared<ShapedPrior>();
    OnlineCostModel model(prior);
    const OnlineCostModel::Factors truth = {factor, factor, factor, factor, factor};
    SplitMix64 rng(3);
    for (int step = 0; step < 5; ++step) {
      const StepShape shape = mixed_step(rng, true, true);
      model.observe(shape, true_ms(*prior, shape, truth));
    }
    const StepShape probe = mixed_step(rng, true, true);
    EXPECT_LT(relative_error(model.predict_step_ms(probe), true_ms(*prior, probe, truth)), 0.05) << factor;
  }
}

// Decode-only steps teach the decode terms; the prefill terms move only as far
// as the prior's correlation carries them (a uniform error is likeliest), not
// all the way to what the decode terms learned.
TEST(OnlineCostModel, UnexercisedTermsMoveOnlyPartway) {
  auto prior = std::make_shared<ShapedPrior>();
  OnlineCostModel model(prior);
  const OnlineCostModel::Factors truth = {4.0, 2.0, 4.0, 2.0, 2.0};
  SplitMix64 rng(4);
  for (int step = 0; step < 30; ++step) {
    const StepShape shape = mixed_step(rng, false, true);
    model.observe(shape, true_ms(*prior, shape, truth));
  }
  for (std::size_t term : {0u, 2u}) {
    EXPECT_GT(model.factors()[term], 1.05) << term;
    EXPECT_LT(model.factors()[term], 2.0) << term;
  }
  StepShape decode = mixed_step(rng, false, true);
  EXPECT_LT(relative_error(model.predict_step_ms(decode), true_ms(*prior, decode, truth)), 0.02);
}

TEST(OnlineCostModel, FollowsATruthThatChanges) {
  auto prior = std::make_shared<ShapedPrior>();
  OnlineCostModel model(prior);
  SplitMix64 rng(5);
  const OnlineCostModel::Factors before = {1, 1, 1, 1, 1}, after = {2, 2, 2, 2, 2};
  for (int step = 0; step < 50; ++step) {
    const StepShape shape = mixed_step(rng, true, true);
    model.observe(shape, true_ms(*prior, shape, before));
  }
  for (int step = 0; step < 30; ++step) {
    const StepShape shape = mixed_step(rng, true, true);
    model.observe(shape, true_ms(*prior, shape, after));
  }
  const StepShape probe = mixed_step(rng, true, true);
  EXPECT_LT(relative_error(model.predict_step_ms(probe), true_ms(*prior, probe, after)), 0.05);
}

TEST(OnlineCostModel, IgnoresStepsWithoutATime) {
  auto prior = std::make_shared<ShapedPrior>();
  OnlineCostModel model(prior);
  SplitMix64 rng(6);
  const StepShape shape = mixed_step(rng, true, true);
  model.observe(shape, 0.0);
  model.observe(shape, std::nan(""));
  model.observe(StepShape{}, 5.0);  // the prior still predicts the fixed cost
  EXPECT_EQ(model.num_observed_steps(), 1);
  EXPECT_NEAR(model.predict_step_ms(StepShape{}), 5.0, 0.05);  // 5 ms measured for 2 ms of fixed cost
}

TEST(OnlineCostModel, FactorsStayInTheirBounds) {
  auto prior = std::make_shared<ShapedPrior>();
  OnlineCostModel model(prior, {.min_factor = 0.1, .max_factor = 10.0});
  SplitMix64 rng(7);
  for (int step = 0; step < 10; ++step) {
    const StepShape shape = mixed_step(rng, true, true);
    model.observe(shape, 1e6 * prior->predict_step_ms(shape));
  }
  for (double f : model.factors()) {
    EXPECT_GE(f, 0.1);
    EXPECT_LE(f, 10.0);
  }
}

// A decode-only stretch after prefills keeps what the prefills taught: the
// next prompt's first chunk is priced right, not by the prior again.
TEST(OnlineCostModel, ADecodeStretchDoesNotEraseThePrefillTerms) {
  auto prior = std::make_shared<ShapedPrior>();
  OnlineCostModel model(prior);
  const OnlineCostModel::Factors truth = {3.0, 3.0, 3.0, 3.0, 3.0};
  SplitMix64 rng(8);
  for (int step = 0; step < 20; ++step) {
    const StepShape shape = mixed_step(rng, true, true);
    model.observe(shape, true_ms(*prior, shape, truth));
  }
  for (int step = 0; step < 500; ++step) {
    const StepShape shape = mixed_step(rng, false, true);
    model.observe(shape, true_ms(*prior, shape, truth));
  }
  EXPECT_NEAR(model.factors()[0], 3.0, 0.3);
  EXPECT_NEAR(model.factors()[2], 3.0, 0.3);
  const StepShape prefill = mixed_step(rng, true, false);
  EXPECT_LT(relative_error(model.predict_step_ms(prefill), true_ms(*prior, prefill, truth)), 0.05);
}

// A truth the prior's terms cannot express (S10-lead-2 on the H200: a mixed
// step carried ~4 ms that no decode-only step had, GEMMs at a few hundred rows
// reading weights slowly): mixed steps must not teach the price of a step's
// decodes alone, which decode-only steps measure, or the planner's
// prefill-share cap (decodes / (1 - share)) stretches every step.
TEST(OnlineCostModel, MixedStepsExtraTimeDoesNotPriceTheDecodesAlone) {
  auto prior = std::make_shared<ShapedPrior>();
  OnlineCostModel model(prior);
  const OnlineCostModel::Factors truth = {1.0, 1.0, 1.0, 1.0, 1.0};
  constexpr double kMixedExtraMs = 20.0;
  SplitMix64 rng(9);
  for (int step = 0; step < 50; ++step) {
    const StepShape shape = mixed_step(rng, false, true);
    model.observe(shape, true_ms(*prior, shape, truth));
  }
  double mixed_error = 0;
  for (int step = 0; step < 400; ++step) {
    const StepShape shape = mixed_step(rng, true, true);
    const double ms = true_ms(*prior, shape, truth) + kMixedExtraMs;
    if (step >= 300) mixed_error += relative_error(model.predict_step_ms(shape), ms) / 100;
    model.observe(shape, ms);
  }
  // The decodes alone: as decode-only steps measured them, within 5%.
  for (int i = 0; i < 5; ++i) {
    const StepShape decodes = mixed_step(rng, false, true);
    EXPECT_LT(relative_error(model.predict_step_ms(decodes), true_ms(*prior, decodes, truth)), 0.05);
  }
  // Mixed steps stay priced about right (the rest's factors take the extra).
  EXPECT_LT(mixed_error, 0.25);
}

}  // namespace
}  // namespace sluice
