// Which decodes the decode lane (EngineConfig::decode_lane) carries. The lane
// runs on a few SMs so that the chats' decodes never wait behind a prefill
// chunk; a decode over a long context reads so much KV that on those SMs it
// slows every chat beside it (S16-lead-1: 3 sequences at 112k made the lane's
// steps 77 ms against 16 ms for the chats alone), while in the prefill lane's
// chunk it costs a few per cent of the step. So the lane takes a decode only
// up to a context, and the prefill lane's steps take the longer ones.
#pragma once

#include <cstdint>

#include "sluice/sched/cost_model.h"

namespace sluice {

// The longest context whose KV read, by the cost model, costs at most a
// quarter of one decode row's weight read: beyond it, one sequence's attention
// would be a large part of the lane's step. max_model_len when no context
// reaches that (a model that prices no KV read, or one whose weights dwarf
// its KV at every length).
std::int32_t auto_decode_lane_max_context(const CostModel& cost_model, std::int32_t max_model_len);

}  // namespace sluice
