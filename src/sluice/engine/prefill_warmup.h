// One prefill chunk run before serving, at the largest shape the server will
// run: --max-num-batched-tokens new tokens at the deepest position the model
// and the KV cache allow. Its buffers (the scratch arena, the attention's
// workspaces, which grow with the prefix) reach their largest size at start,
// so a serving step allocates nothing new, and a device that cannot hold
// that step fails at start instead of mid-request (S33-2: DeepSeek-V3's
// first 8k chunk ran out of device memory while serving).
//
// Like the decode lane's warm-up (decode_lane_warmup.h), it writes KV into
// blocks nobody holds yet, so it leaves no state a request can see.
#pragma once

#include <cstdint>
#include <optional>

#include "sluice/backend/backend.h"
#include "sluice/common/backend_info.h"
#include "sluice/common/result.h"

namespace sluice {

struct PrefillWarmupShape {
  std::int32_t num_computed_tokens = 0;  // the chunk's prefix
  std::int32_t num_new_tokens = 0;       // the chunk
};

// The largest chunk (max_num_batched_tokens, or the whole model length if
// shorter) ending at the deepest position: the model's length, or the
// cache's capacity if that is smaller.
PrefillWarmupShape largest_prefill_chunk(const BackendInfo& info, std::int32_t max_num_batched_tokens);

struct PrefillWarmup {
  PrefillWarmupShape shape;
  double seconds = 0.0;
  // Device memory free after it (Backend::device_memory_free_bytes): the
  // headroom the largest step leaves, against the activation reserve the
  // memory plan set aside.
  std::optional<std::int64_t> free_bytes_after;
};

// Runs that chunk as one greedy step on `backend` (token id 0 throughout).
Result<PrefillWarmup> warm_largest_prefill(Backend& backend, std::int32_t max_num_batched_tokens);

}  // namespace sluice
