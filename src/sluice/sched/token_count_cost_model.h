// A cost model for when no better one is known (the CPU backend): time grows
// linearly with tokens and with attended context. Good enough to keep the
// planner's time cap meaningful; not a prediction of anything real.
#pragma once

#include "sluice/sched/cost_model.h"

namespace sluice {

class TokenCountCostModel final : public CostModel {
 public:
  struct Coefficients {
    double fixed_ms = 1.0;
    double per_token_ms = 0.01;
    double per_token_context_ms = 1e-7;  // per (new token x context token)
  };
  TokenCountCostModel() = default;
  explicit TokenCountCostModel(Coefficients c) : c_(c) {}

  double predict_step_ms(const StepShape& shape) const override {
    double ms = c_.fixed_ms;
    for (const auto& s : shape.sequences) {
      const double n = s.num_new_tokens;
      ms += n * c_.per_token_ms +
            c_.per_token_context_ms * n * (static_cast<double>(s.num_computed_tokens) + n / 2.0);
    }
    return ms;
  }

 private:
  Coefficients c_;
};

}  // namespace sluice
