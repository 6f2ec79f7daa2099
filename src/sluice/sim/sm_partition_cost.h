// What a step costs on part of the GPU's SMs (a green-context lane,
// --decode-lane sms:N), and the fewest SMs on which the chats' decode step
// keeps its pace: the sim backend prices its lanes with the first, `serve`'s
// --decode-lane auto sizes the lane with the second.
#pragma once

#include <cstdint>

#include "sluice/sched/cost_model.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/skewed_cost_model.h"

namespace sluice::sim {

// A step on `sms` of `num_sms` SMs: compute terms slower by the SM share
// (and by `compute_factor` more: the other lane's contention), memory terms
// by the HBM share those SMs reach, the fixed term as it was.
CostSkew confined_to(std::int32_t sms, std::int32_t num_sms, double hbm_share_per_sm, double compute_factor = 1.0);

// The step the lane's pace is sized for: the user report's 8 chats, short
// contexts (docs/architecture.md, "Decodes beside prefill").
StepShape chats_decode_step();

// The fewest SMs, in the driver's groups (hardware.sm_group_granularity), on
// which `whole` (the step's price on every SM) confined as above prices
// chats_decode_step() at no more than `fill` of `pace_ms`; at most half the
// SMs, since the other lane's chunks are what the first tokens wait for.
// 0 when even half cannot keep the pace, or the hardware cannot be split.
std::int32_t fewest_decode_lane_sms(const CostModel& whole, const HardwareSpec& hardware, double pace_ms,
                                    double fill);

// The longest context at which chats_decode_step()'s 8 chats, all at that
// context, still step within `step_ms` on `sms` SMs (up to `max_context`):
// what a lane sized for short chats holds at the promised rate. 0 when not
// even short chats do.
std::int32_t decode_lane_chat_context(const CostModel& whole, const HardwareSpec& hardware, std::int32_t sms,
                                      double step_ms, std::int32_t max_context);

}  // namespace sluice::sim
