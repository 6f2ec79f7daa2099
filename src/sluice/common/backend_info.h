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
};

}  // namespace sluice
