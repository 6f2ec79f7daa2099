// OnlineCostModel: a prior CostModel corrected by the measured duration of each
// step, so a wrong prior (an efficiency guessed, not measured; a GPU slower or
// faster than its profile) cannot mis-size steps for long.
//
// Each term of the prior's CostTerms gets its own factor f_i, and a step
// measured at m ms says sum_i f_i * term_i / m = 1. A Kalman filter over the
// five factors (a random walk, so the truth may drift) takes each step in:
// a step moves only the factors of the terms it exercised, in proportion to
// how uncertain each is, so a decode-only stretch teaches the decode terms and
// keeps what the last prefill taught about the prefill terms, and terms that
// steps cannot tell apart (weight reads and fixed costs are both constant per
// decode step) share a correction instead of drifting to extremes. The prior
// correlates the factors (a uniformly slower GPU is the likeliest error), so
// the first decode steps already move the prefill factors part of the way.
// Worked example: if attention over long prefixes truly costs 2.5x the prior,
// the attention factor is near 2.5 after a few chunked-prefill steps, and the
// planner's chunks shrink to match.
//
// Once a decode-only step has been seen, a step is two parts: its decodes
// (sequences of one new token) and the rest (the prior's terms of the whole
// step less those of its decodes alone). A second filter,
// fed decode-only steps only, prices the decodes; the first prices the rest,
// learning from what a mixed step's measured time leaves after the decodes.
// With one filter, mixed steps could not tell a chunk's unexplained time from
// its decodes' (the correlated prior and the shared fixed term move every
// factor): on the H200 burst (S10-lead-2) it came to price a step's decodes
// alone at a median 50 ms where decode-only steps measured 5.3, so the
// planner's prefill-share cap (decodes / (1 - share)) stretched steps to
// 70-94 ms and the chats' rate fell to 18 tok/s (`sluice calibrate` replays
// a trace through this model and prints both).
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
    double initial_std = 1.0;        // prior uncertainty of each factor (the prior is 1)
    double initial_correlation = 0.5;  // between two factors' errors, in the prior
    double drift_std_per_step = 0.02;  // how far a factor may move per step on its own
    double measurement_std = 0.03;     // relative noise of one step's measured time
    double min_factor = 0.05;
    double max_factor = 20.0;
  };
  static constexpr std::size_t kNumTerms = CostTerms::kNumTerms;
  using Factors = std::array<double, kNumTerms>;

  explicit OnlineCostModel(std::shared_ptr<const CostModel> prior);
  OnlineCostModel(std::shared_ptr<const CostModel> prior, Options options);

  double predict_step_ms(const StepShape& shape) const override;
  CostTerms predict_terms(const StepShape& shape) const override;  // the prior's terms, corrected
  std::int32_t query_tile_rows() const override { return prior_->query_tile_rows(); }

  // Learns from one executed step. Steps with no predicted or measured time
  // (empty, failed) teach nothing and are ignored.
  void observe(const StepShape& shape, double measured_ms);

  // By CostTerms::values() order: the whole step's (the rest's, once a
  // decode-only step was seen) and the decodes'.
  const Factors& factors() const { return all_.factors; }
  const Factors& decode_factors() const { return decodes_.factors; }
  std::int64_t num_observed_steps() const { return all_.num_observed; }
  std::int64_t num_observed_decode_steps() const { return decodes_.num_observed; }
  const CostModel& prior() const { return *prior_; }

 private:
  // One Kalman filter over the factors.
  struct Filter {
    Factors factors;
    std::array<std::array<double, kNumTerms>, kNumTerms> covariance{};  // of the factors' error
    std::int64_t num_observed = 0;
    explicit Filter(const Options& options);
    void observe(const std::array<double, kNumTerms>& terms, double measured_ms, const Options& options);
  };
  // The prior's terms of a step's decodes alone and of the rest, given the
  // prior's terms of the whole step.
  struct Parts {
    std::array<double, kNumTerms> decodes{}, rest{};
    bool decodes_only = false;
  };
  Parts parts_of(const StepShape& shape, const std::array<double, kNumTerms>& whole) const;
  std::shared_ptr<const CostModel> prior_;
  Options options_;
  Filter all_, decodes_;
};

}  // namespace sluice
