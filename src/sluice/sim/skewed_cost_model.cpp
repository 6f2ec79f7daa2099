#include "sluice/sim/skewed_cost_model.h"

#include <utility>

#include "sluice/common/check.h"

namespace sluice::sim {

SkewedCostModel::SkewedCostModel(std::shared_ptr<const CostModel> believed, CostSkew skew)
    : believed_(std::move(believed)), skew_(skew) {
  SLUICE_CHECK(believed_ != nullptr);
  for (double f : skew_.term_factors) SLUICE_CHECK(f > 0.0);
  SLUICE_CHECK(skew_.long_prefix_attention_factor > 0.0);
}

CostTerms SkewedCostModel::predict_terms(const StepShape& shape) const {
  const auto& f = skew_.term_factors;
  CostTerms t = believed_->predict_terms(shape).scaled(f);
  if (skew_.long_prefix_attention_factor == 1.0) return t;
  // The long-context sequences' own attention, priced alone, scaled again.
  StepShape long_part;
  for (const auto& s : shape.sequences)
    if (s.num_computed_tokens + s.num_new_tokens >= skew_.long_prefix_tokens) long_part.sequences.push_back(s);
  if (long_part.sequences.empty()) return t;
  const CostTerms extra = believed_->predict_terms(long_part);
  const double more = skew_.long_prefix_attention_factor - 1.0;
  t.attention_compute_ms += more * f[2] * extra.attention_compute_ms;
  t.attention_memory_ms += more * f[3] * extra.attention_memory_ms;
  return t;
}

}  // namespace sluice::sim
