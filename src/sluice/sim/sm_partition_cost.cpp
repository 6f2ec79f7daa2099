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

std::int32_t fewest_decode_lane_sms(const CostModel& whole, const HardwareSpec& hardware, double pace_ms,
                                    double fill) {
  if (hardware.num_sms <= 0 || hardware.hbm_share_per_sm <= 0.0) return 0;
  const std::int32_t group = std::max(1, hardware.sm_group_granularity);
  // A non-owning handle: the skewed model only reads `whole` here.
  const std::shared_ptr<const CostModel> believed(std::shared_ptr<const CostModel>(), &whole);
  for (std::int32_t sms = group; sms <= hardware.num_sms / 2; sms += group) {
    const SkewedCostModel lane(believed, confined_to(sms, hardware.num_sms, hardware.hbm_share_per_sm));
    if (lane.predict_step_ms(chats_decode_step()) <= fill * pace_ms) return sms;
  }
  return 0;
}

}  // namespace sluice::sim
