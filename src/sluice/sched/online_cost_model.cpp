#include "sluice/sched/online_cost_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "sluice/common/check.h"

namespace sluice {

OnlineCostModel::OnlineCostModel(std::shared_ptr<const CostModel> prior)
    : OnlineCostModel(std::move(prior), Options{}) {}

OnlineCostModel::Filter::Filter(const Options& options) {
  factors.fill(1.0);
  const double var = options.initial_std * options.initial_std;
  for (std::size_t i = 0; i < kNumTerms; ++i)
    for (std::size_t j = 0; j < kNumTerms; ++j) covariance[i][j] = i == j ? var : options.initial_correlation * var;
}

OnlineCostModel::OnlineCostModel(std::shared_ptr<const CostModel> prior, Options options)
    : prior_(std::move(prior)), options_(options), all_(options_), decodes_(options_) {
  SLUICE_CHECK(prior_ != nullptr);
  SLUICE_CHECK(options_.initial_std > 0.0 && options_.measurement_std > 0.0 && options_.drift_std_per_step >= 0.0);
  SLUICE_CHECK(options_.initial_correlation >= 0.0 && options_.initial_correlation < 1.0);
  SLUICE_CHECK(options_.min_factor > 0.0 && options_.min_factor <= 1.0 && options_.max_factor >= 1.0);
}

OnlineCostModel::Parts OnlineCostModel::parts_of(const StepShape& shape,
                                                 const std::array<double, kNumTerms>& whole) const {
  Parts parts;
  StepShape decodes;
  for (const StepShape::Sequence& s : shape.sequences)
    if (s.num_new_tokens == 1) decodes.sequences.push_back(s);
  parts.decodes_only = decodes.sequences.size() == shape.sequences.size();
  if (parts.decodes_only) {
    parts.decodes = whole;
    return parts;
  }
  if (!decodes.sequences.empty()) parts.decodes = prior_->predict_terms(decodes).values();
  // A term may be negative: the weights a decode step reads are read by the
  // chunk's GEMMs too, which the roofline prices as compute instead.
  for (std::size_t i = 0; i < kNumTerms; ++i) parts.rest[i] = whole[i] - parts.decodes[i];
  return parts;
}

CostTerms OnlineCostModel::predict_terms(const StepShape& shape) const {
  const CostTerms prior = prior_->predict_terms(shape);
  if (decodes_.num_observed == 0) return prior.scaled(all_.factors);
  const Parts parts = parts_of(shape, prior.values());
  std::array<double, kNumTerms> t{};
  for (std::size_t i = 0; i < kNumTerms; ++i)
    t[i] = parts.decodes[i] * decodes_.factors[i] + parts.rest[i] * all_.factors[i];
  return {.gemm_compute_ms = t[0], .gemm_memory_ms = t[1], .attention_compute_ms = t[2], .attention_memory_ms = t[3],
          .fixed_ms = t[4]};
}

double OnlineCostModel::predict_step_ms(const StepShape& shape) const { return predict_terms(shape).total_ms(); }

void OnlineCostModel::observe(const StepShape& shape, double measured_ms) {
  if (!(measured_ms > 0.0) || !std::isfinite(measured_ms)) return;
  const auto whole = prior_->predict_terms(shape).values();
  double predicted = 0;
  for (double v : whole) predicted += v;
  if (!(predicted > 0.0)) return;
  const Parts parts = parts_of(shape, whole);
  if (parts.decodes_only) {
    decodes_.observe(whole, measured_ms, options_);
    // The whole-step filter learns them too: before the first mixed step its
    // correlated prior moves the prefill terms part of the way (a uniformly
    // slower GPU is the likeliest error).
    all_.observe(whole, measured_ms, options_);
    return;
  }
  if (decodes_.num_observed == 0) {
    all_.observe(whole, measured_ms, options_);
    return;
  }
  // The rest's time: what the decodes, priced by their own filter, leave. A
  // step the decodes nearly fill says little about the rest: skipped.
  double decodes_ms = 0;
  for (std::size_t i = 0; i < kNumTerms; ++i) decodes_ms += parts.decodes[i] * decodes_.factors[i];
  const double rest_ms = measured_ms - decodes_ms;
  double rest_prior = 0;
  for (double v : parts.rest) rest_prior += v;
  if (rest_ms > 0.1 * measured_ms && rest_prior > 0.0) all_.observe(parts.rest, rest_ms, options_);
}

void OnlineCostModel::Filter::observe(const std::array<double, kNumTerms>& terms, double measured_ms,
                                      const Options& options) {
  constexpr std::size_t n = kNumTerms;
  // Drift: every factor may have moved a little since the last step, up to the
  // prior's uncertainty (a term unseen for long is not less known than at start).
  const double drift = options.drift_std_per_step * options.drift_std_per_step;
  const double cap = options.initial_std * options.initial_std;
  for (std::size_t i = 0; i < n; ++i)
    if (covariance[i][i] < cap) covariance[i][i] += drift;
  // Measurement x . f = 1, with x the prior's terms over the measured time.
  std::array<double, n> x{};
  for (std::size_t i = 0; i < n; ++i) x[i] = terms[i] / measured_ms;
  std::array<double, n> px{};  // P x
  double xpx = 0, residual = 1.0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) px[i] += covariance[i][j] * x[j];
    xpx += x[i] * px[i];
    residual -= x[i] * factors[i];
  }
  const double s = xpx + options.measurement_std * options.measurement_std;
  for (std::size_t i = 0; i < n; ++i) {
    const double gain = px[i] / s;
    factors[i] = std::clamp(factors[i] + gain * residual, options.min_factor, options.max_factor);
  }
  // P <- P - (P x)(P x)^T / s (Joseph-free form; symmetric by construction).
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) covariance[i][j] -= px[i] * px[j] / s;
  ++num_observed;
}

}  // namespace sluice
