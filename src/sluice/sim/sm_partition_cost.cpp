#include "sluice/sim/sm_partition_cost.h"

#include <algorithm>
#include <memory>

namespace sluice::sim {

CostSkew confined_to(std::int32_t sms, std::int32_t num_sms, double hbm_share_per_sm, double compute_factor) {
  const double compute = compute_factor * num_sms / sms;
  const double memory = 1.0 / std::min(1.0, sms * hbm_share_per_sm);
  return {.term_factors = {compute, memory, compute, memory, 1.0}};
}

StepShape chats_decode_step() {
  StepShape step;
  step.sequences.assign(8, {.num_new_tokens = 1, .num_computed_tokens = 1024});
  return step;
}

namespace {

// `whole` priced on `sms` SMs. The handle does not own `whole`: the skewed
// model lives only while its caller holds `whole`.
SkewedCostModel on_sms(const CostModel& whole, const HardwareSpec& hardware, std::int32_t sms) {
  const std::shared_ptr<const CostModel> believed(std::shared_ptr<const CostModel>(), &whole);
  return SkewedCostModel(believed, confined_to(sms, hardware.num_sms, hardware.hbm_share_per_sm));
}

StepShape chats_at(std::int32_t context) {
  StepShape step = chats_decode_step();
  for (auto& s : step.sequences) s.num_computed_tokens = context;
  return step;
}

}  // namespace

std::int32_t fewest_decode_lane_sms(const CostModel& whole, const HardwareSpec& hardware, double pace_ms,
                                    double fill) {
  if (hardware.num_sms <= 0 || hardware.hbm_share_per_sm <= 0.0) return 0;
  const std::int32_t group = std::max(1, hardware.sm_group_granularity);
  for (std::int32_t sms = group; sms <= hardware.num_sms / 2; sms += group)
    if (on_sms(whole, hardware, sms).predict_step_ms(chats_decode_step()) <= fill * pace_ms) return sms;
  return 0;
}

std::int32_t decode_lane_chat_context(const CostModel& whole, const HardwareSpec& hardware, std::int32_t sms,
                                      double step_ms, std::int32_t max_context) {
  const SkewedCostModel lane = on_sms(whole, hardware, sms);
  const std::int32_t shortest = chats_decode_step().sequences.front().num_computed_tokens;
  if (lane.predict_step_ms(chats_at(shortest)) > step_ms) return 0;
  if (lane.predict_step_ms(chats_at(max_context)) <= step_ms) return max_context;
  // The step grows with the context: bisect [fits, does not fit).
  std::int32_t fits = shortest, over = max_context;
  while (over - fits > 1) {
    const std::int32_t mid = fits + (over - fits) / 2;
    (lane.predict_step_ms(chats_at(mid)) <= step_ms ? fits : over) = mid;
  }
  return fits;
}

}  // namespace sluice::sim
