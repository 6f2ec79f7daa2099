#include "sluice/sched/online_cost_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "sluice/common/check.h"

namespace sluice {

OnlineCostModel::OnlineCostModel(std::shared_ptr<const CostModel> prior)
    : OnlineCostModel(std::move(prior), Options{}) {}

OnlineCostModel::OnlineCostModel(std::shared_ptr<const CostModel> prior, Options options)
    : prior_(std::move(prior)), options_(options) {
  SLUICE_CHECK(prior_ != nullptr);
  SLUICE_CHECK(options_.initial_std > 0.0 && options_.measurement_std > 0.0 && options_.drift_std_per_step >= 0.0);
  SLUICE_CHECK(options_.initial_correlation >= 0.0 && options_.initial_correlation < 1.0);
  SLUICE_CHECK(options_.min_factor > 0.0 && options_.min_factor <= 1.0 && options_.max_factor >= 1.0);
  factors_.fill(1.0);
  const double var = options_.initial_std * options_.initial_std;
  for (std::size_t i = 0; i < kNumTerms; ++i)
    for (std::size_t j = 0; j < kNumTerms; ++j) covariance_[i][j] = i == j ? var : options_.initial_correlation * var;
}

CostTerms OnlineCostModel::predict_terms(const StepShape& shape) const {
  return prior_->predict_terms(shape).scaled(factors_);
}

double OnlineCostModel::predict_step_ms(const StepShape& shape) const { return predict_terms(shape).total_ms(); }

void OnlineCostModel::observe(const StepShape& shape, double measured_ms) {
  if (!(measured_ms > 0.0) || !std::isfinite(measured_ms)) return;
  const auto terms = prior_->predict_terms(shape).values();
  double predicted = 0;
  for (double v : terms) predicted += v;
  if (!(predicted > 0.0)) return;
  constexpr std::size_t n = kNumTerms;

  // Drift: every factor may have moved a little since the last step, up to the
  // prior's uncertainty (a term unseen for long is not less known than at start).
  const double drift = options_.drift_std_per_step * options_.drift_std_per_step;
  const double cap = options_.initial_std * options_.initial_std;
  for (std::size_t i = 0; i < n; ++i)
    if (covariance_[i][i] < cap) covariance_[i][i] += drift;

  // Measurement x . f = 1, with x the prior's terms over the measured time.
  std::array<double, n> x{};
  for (std::size_t i = 0; i < n; ++i) x[i] = terms[i] / measured_ms;
  std::array<double, n> px{};  // P x
  double xpx = 0, residual = 1.0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) px[i] += covariance_[i][j] * x[j];
    xpx += x[i] * px[i];
    residual -= x[i] * factors_[i];
  }
  const double s = xpx + options_.measurement_std * options_.measurement_std;
  for (std::size_t i = 0; i < n; ++i) {
    const double gain = px[i] / s;
    factors_[i] = std::clamp(factors_[i] + gain * residual, options_.min_factor, options_.max_factor);
  }
  // P <- P - (P x)(P x)^T / s (Joseph-free form; symmetric by construction).
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) covariance_[i][j] -= px[i] * px[j] / s;
  ++num_observed_steps_;
}

}  // namespace sluice
