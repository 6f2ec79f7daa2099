// What a backend tells the layers above it about itself: its name and the
// capacity the engine plans with. Vocabulary, so the server can read the vocab
// size through the engine without seeing backend types.
#pragma once

#include <cstdint>
#include <string>

namespace sluice {

struct BackendInfo {
  std::string name;            // "cpu", "cuda", "sim"
  std::int32_t block_size_tokens = 16;
  std::int32_t num_kv_blocks = 0;
  std::int32_t vocab_size = 0;
  std::int32_t max_model_len_tokens = 0;
  // One KV block, every layer (all devices together): what a host-tier copy
  // moves, and what --kv-offloading-size is divided by. 0: no host tier.
  std::int64_t kv_bytes_per_block = 0;
  // Host<->device copy rate, each direction (all devices together): what the
  // planner prices a promotion with. 0: unknown.
  double host_link_bytes_per_s = 0;
};

// A lane's (Backend::make_lane) info: the backend's, without a host tier (its
// copies stay with the backend the lane was made from).
inline BackendInfo lane_info_of(BackendInfo info) {
  info.kv_bytes_per_block = 0;
  info.host_link_bytes_per_s = 0;
  return info;
}

}  // namespace sluice
