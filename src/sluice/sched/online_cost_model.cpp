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
  SLUICE_CHECK(options_.forgetting > 0.0 && options_.forgetting <= 1.0);
  SLUICE_CHECK(options_.min_factor > 0.0 && options_.min_factor <= 1.0 && options_.max_factor >= 1.0);
  factors_.fill(1.0);
}

CostTerms OnlineCostModel::predict_terms(const StepShape& shape) const {
  CostTerms t = prior_->predict_terms(shape);
  t.gemm_compute_ms *= factors_[0];
  t.gemm_memory_ms *= factors_[1];
  t.attention_compute_ms *= factors_[2];
  t.attention_memory_ms *= factors_[3];
  t.fixed_ms *= factors_[4];
  return t;
}

double OnlineCostModel::predict_step_ms(const StepShape& shape) const { return predict_terms(shape).total_ms(); }

void OnlineCostModel::observe(const StepShape& shape, double measured_ms) {
  if (!(measured_ms > 0.0) || !std::isfinite(measured_ms)) return;
  const auto terms = prior_->predict_terms(shape).values();
  double predicted = 0;
  for (double v : terms) predicted += v;
  if (!(predicted > 0.0)) return;
  std::array<double, kN> x{};
  for (std::size_t i = 0; i < kN; ++i) x[i] = terms[i] / measured_ms;
  const double w = options_.forgetting;
  for (std::size_t i = 0; i < kN; ++i) {
    for (std::size_t j = 0; j < kN; ++j) gram_[i][j] = w * gram_[i][j] + x[i] * x[j];
    rhs_[i] = w * rhs_[i] + x[i];  // y = 1
  }
  ++num_observed_steps_;
  refit();
}

// Solves (gram + r I) f = rhs + r 1 by Gaussian elimination with partial
// pivoting: least squares pulled towards f = 1 with strength r.
void OnlineCostModel::refit() {
  double best = 0;
  for (std::size_t i = 0; i < kN; ++i) best = std::max(best, gram_[i][i]);
  const double r = options_.prior_weight * best + 1e-12;
  std::array<std::array<double, kN + 1>, kN> m{};
  for (std::size_t i = 0; i < kN; ++i) {
    for (std::size_t j = 0; j < kN; ++j) m[i][j] = gram_[i][j] + (i == j ? r : 0.0);
    m[i][kN] = rhs_[i] + r;
  }
  for (std::size_t col = 0; col < kN; ++col) {
    std::size_t pivot = col;
    for (std::size_t row = col + 1; row < kN; ++row)
      if (std::fabs(m[row][col]) > std::fabs(m[pivot][col])) pivot = row;
    std::swap(m[col], m[pivot]);
    SLUICE_CHECK(m[col][col] > 0.0 || m[col][col] < 0.0);  // r > 0 keeps the system regular
    for (std::size_t row = 0; row < kN; ++row) {
      if (row == col) continue;
      const double k = m[row][col] / m[col][col];
      for (std::size_t j = col; j <= kN; ++j) m[row][j] -= k * m[col][j];
    }
  }
  for (std::size_t i = 0; i < kN; ++i)
    factors_[i] = std::clamp(m[i][kN] / m[i][i], options_.min_factor, options_.max_factor);
}

}  // namespace sluice
