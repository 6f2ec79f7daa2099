// Cost-model calibration from measured steps: reads a step trace (`serve
// --step-trace`, engine/step_trace.h) and fits one factor per CostTerms term
// so that sum_i factor_i * term_i matches each step's measured time, the same
// per-term correction OnlineCostModel learns while serving, but over a whole
// run at once and offline. `sluice calibrate` prints it; the factors
// say how far each efficiency of a HardwareSpec is off (docs/cost-model.md).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sluice/common/result.h"
#include "sluice/sched/cost_model.h"
#include "sluice/sim/hardware.h"

namespace sluice::sim {

struct TracedStep {
  double start_ms = 0;
  double measured_ms = 0;
  double predicted_ms = 0;  // what the planner believed (after its online correction)
  StepShape shape;
  // "main" or "decode" with two step loops, empty with one. A decode lane's
  // step shares the GPU with a prefill chunk: its time is not the step's alone.
  std::string lane;
  // Of measured_ms, one-time setup (a plan built, a graph captured): the step
  // is not timed as its shape costs.
  double setup_ms = 0;
};

// One TracedStep per line of `path`; the error names the line.
Result<std::vector<TracedStep>> read_step_trace(const std::string& path);

// The q-quantile of `values` (the element at floor(q (n - 1)) in sorted
// order: the lower of two middles for the median); 0 for none.
double quantile(std::vector<double> values, double q);

// |predicted / measured - 1| over a set of steps.
struct RelativeErrorStats {
  std::int64_t num_steps = 0;
  double median = 0;
  double p90 = 0;
  double mean_signed = 0;  // > 0: predictions too long on average
};

struct TermFactorFit {
  using Factors = std::array<double, CostTerms::kNumTerms>;  // CostTerms::values() order
  Factors factors{1, 1, 1, 1, 1};
  // A term no step exercised keeps factor 1: the trace says nothing about it.
  std::array<bool, CostTerms::kNumTerms> identified{};
  std::int64_t num_outliers = 0;  // steps left out of the second pass (warm-up, graph capture)
  RelativeErrorStats prior;       // the model as it is
  RelativeErrorStats fitted;      // with the factors, over the steps the fit kept
};

// Non-negative least squares on relative error: minimises
// sum_s (sum_i f_i * term_si / measured_s - 1)^2 over f >= 0, with a weak
// pull toward f = 1 so terms the steps cannot tell apart share the
// correction (as OnlineCostModel's correlated prior does), then once more
// without the steps the first pass missed by more than max(50%, 4x the median).
TermFactorFit fit_term_factors(const CostModel& model, std::span<const TracedStep> steps);

RelativeErrorStats relative_errors(const CostModel& model, std::span<const TracedStep> steps,
                                   const TermFactorFit::Factors& factors);

// `hardware` with each efficiency divided by its term's factor (and the fixed
// per-step costs multiplied by the fixed term's): the spec the fit implies.
HardwareSpec apply_term_factors(HardwareSpec hardware, const TermFactorFit::Factors& factors);

}  // namespace sluice::sim
