// SkewedCostModel: a "true" step time that differs from what the planner
// believes, for the sim backend. The scheduler plans with one cost model; a
// SimBackend built on a SkewedCostModel of it advances its clock by another,
// so a simulated run can show what a wrong prediction costs (a simulator whose
// truth equals the planner's belief can never show that).
//
// Two kinds of error: each CostTerms term off by its own factor (a GPU slower
// than its profile, a kernel at half the assumed efficiency), and attention
// over long prefixes off by a further factor (a term-wise correction can only
// approximate that one, as real kernels' costs are not linear in the terms).
#pragma once

#include <memory>

#include "sluice/sched/cost_model.h"
#include "sluice/sched/online_cost_model.h"

namespace sluice::sim {

struct CostSkew {
  OnlineCostModel::Factors term_factors = {1, 1, 1, 1, 1};  // by CostTerms::values() order
  // Attention of sequences whose context (cached + new) reaches
  // long_prefix_tokens costs this much more again.
  double long_prefix_attention_factor = 1.0;
  std::int32_t long_prefix_tokens = 32768;

  static CostSkew uniform(double factor) { return {.term_factors = {factor, factor, factor, factor, factor}}; }
};

class SkewedCostModel final : public CostModel {
 public:
  SkewedCostModel(std::shared_ptr<const CostModel> believed, CostSkew skew);

  double predict_step_ms(const StepShape& shape) const override { return predict_terms(shape).total_ms(); }
  CostTerms predict_terms(const StepShape& shape) const override;
  std::int32_t query_tile_rows() const override { return believed_->query_tile_rows(); }

 private:
  std::shared_ptr<const CostModel> believed_;
  CostSkew skew_;
};

}  // namespace sluice::sim
