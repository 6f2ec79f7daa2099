// OnlineCostModel: a prior CostModel corrected by the measured duration of each
// step, so a wrong prior (an efficiency guessed, not measured; a GPU slower or
// faster than its profile) cannot mis-size steps for long.
//
// Each term of the prior's CostTerms gets its own factor, fitted by
// exponentially weighted least squares over recent steps on relative error
// (measured / predicted), so a long prefill step and a short decode step count
// alike. A weak pull towards 1 keeps the prior's value for a term no recent
// step exercised: a decode-only stretch teaches the decode terms and leaves
// the prefill terms alone. Worked example: if attention over long prefixes
// truly costs 2.5x the prior, the attention_compute factor reaches about 2.5
// after a few chunked-prefill steps and the planner's chunks shrink to match.
//
// Not thread-safe: the engine thread plans with it and observes each step.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "sluice/sched/cost_model.h"

namespace sluice {

class OnlineCostModel final : public CostModel {
 public:
  struct Options {
    double forgetting = 0.9;     // a step k steps old weighs forgetting^k
    double prior_weight = 1e-4;  // pull towards factor 1, relative to the best-measured term
    double min_factor = 0.05;
    double max_factor = 20.0;
  };
  using Factors = std::array<double, CostTerms::kNumTerms>;

  explicit OnlineCostModel(std::shared_ptr<const CostModel> prior);
  OnlineCostModel(std::shared_ptr<const CostModel> prior, Options options);

  double predict_step_ms(const StepShape& shape) const override;
  CostTerms predict_terms(const StepShape& shape) const override;  // the prior's terms, corrected

  // Learns from one executed step. Steps with no predicted or measured time
  // (empty, failed) teach nothing and are ignored.
  void observe(const StepShape& shape, double measured_ms);

  const Factors& factors() const { return factors_; }  // by CostTerms::values() order
  std::int64_t num_observed_steps() const { return num_observed_steps_; }
  const CostModel& prior() const { return *prior_; }

 private:
  void refit();

  std::shared_ptr<const CostModel> prior_;
  Options options_;
  static constexpr std::size_t kN = CostTerms::kNumTerms;
  // Normal equations of the weighted fit: gram_ = sum w x x^T, rhs_ = sum w x y,
  // with x = terms / measured and y = 1 (relative error).
  std::array<std::array<double, kN>, kN> gram_{};
  std::array<double, kN> rhs_{};
  Factors factors_;
  std::int64_t num_observed_steps_ = 0;
};

}  // namespace sluice
