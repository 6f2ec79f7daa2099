#include "sluice/sched/decode_lane_bound.h"

namespace sluice {
namespace {

constexpr double kKvShareOfWeights = 0.25;

bool kv_read_fits(const CostModel& cost_model, std::int32_t context) {
  StepShape one_row;
  one_row.sequences.push_back({.num_new_tokens = 1, .num_computed_tokens = context - 1});
  const CostTerms terms = cost_model.predict_terms(one_row);
  return terms.attention_memory_ms <= kKvShareOfWeights * terms.gemm_memory_ms;
}

}  // namespace

std::int32_t auto_decode_lane_max_context(const CostModel& cost_model, std::int32_t max_model_len) {
  if (max_model_len <= 1 || kv_read_fits(cost_model, max_model_len)) return max_model_len;
  // The KV read grows with the context: the last context that fits, by bisection.
  std::int32_t fits = 1;
  std::int32_t too_long = max_model_len;
  while (too_long - fits > 1) {
    const std::int32_t mid = fits + (too_long - fits) / 2;
    (kv_read_fits(cost_model, mid) ? fits : too_long) = mid;
  }
  return fits;
}

}  // namespace sluice
