// Backend: runs Batches. The CPU and CUDA backends compute them through an Ops
// implementation and a model architecture; the sim backend only advances a clock.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/backend/batch.h"

namespace sluice {

struct BackendInfo {
  std::string name;            // "cpu", "cuda", "sim"
  std::int32_t block_size_tokens = 16;
  std::int32_t num_kv_blocks = 0;
  std::int32_t vocab_size = 0;
  std::int32_t max_model_len_tokens = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const BackendInfo& info() const = 0;
  // Runs one step. A failure here fails the step's requests, not the engine.
  virtual Result<StepOutput> execute(const Batch& batch) = 0;
};

}  // namespace sluice
