// Decode steps run on the decode lane before serving, over the batch sizes
// and contexts it will see: the first step of a new shape loads kernels
// (lazily, into the lane's context) and captures a graph. Loading a kernel
// waits for the whole device, so the first time it happens beside a prefill
// chunk it stalls every decode for that chunk (S15-lead-3: 0.4-0.7 s gaps at
// the first long-context decode and the first step of a new batch size;
// S16-lead-1: 287 ms at the first step of a context class not warmed).
//
// The steps write one token's KV into blocks nobody holds yet (before
// serving, every block is free), so they leave no state a request can see.
#pragma once

#include <cstdint>
#include <vector>

#include "sluice/backend/backend.h"
#include "sluice/common/backend_info.h"
#include "sluice/common/result.h"

namespace sluice {

struct DecodeLaneWarmup {
  std::vector<std::int32_t> batch_sizes;  // rows per step
  std::vector<std::int32_t> contexts;     // tokens per sequence, the step's longest
  std::int32_t num_steps = 0;
  double seconds = 0.0;
};

// The batch sizes a warm-up covers: every size to 16, then steps of about
// half an octave, up to max_num_seqs.
std::vector<std::int32_t> warmup_batch_sizes(std::int32_t max_num_seqs);

// Per batch size and context (every doubling from a short one up to
// max_context, the longest a decode on the lane may have): every sequence at
// that context, and one at it beside short ones (an uneven split, as a long
// prompt's decode beside chats). Greedy, one row each. A step that holds more
// tokens than the cache is left out.
Result<DecodeLaneWarmup> warm_decode_lane(Backend& lane, const BackendInfo& info, std::int32_t max_num_seqs,
                                          std::int32_t max_context);

}  // namespace sluice
