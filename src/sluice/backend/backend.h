// Backend: runs Batches. The CPU and CUDA backends compute them through an Ops
// implementation and a model architecture; the sim backend only advances a clock.
#pragma once

#include <optional>
#include <string>

#include "sluice/backend/batch.h"
#include "sluice/common/backend_info.h"

namespace sluice {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const BackendInfo& info() const = 0;
  // Runs one step. A failure here fails the step's requests, not the engine,
  // unless fatal_error() says the backend is gone.
  virtual Result<StepOutput> execute(const Batch& batch) = 0;
  // (optional) Why this backend can run no step any more (a rank of its
  // tensor-parallel group failed), or nothing while it can. The engine asks
  // after every step: once set, it fails every request and refuses new ones.
  // Thread-safe (asked while another step may be in flight).
  virtual std::optional<std::string> fatal_error() const { return std::nullopt; }
  // (optional) Host memory for `num_blocks` KV blocks (the host tier), each
  // BackendInfo::kv_bytes_per_block, addressed by Batch::copies. Called once,
  // before the first step. Backends without a host tier refuse.
  virtual Status allocate_host_kv_cache(std::int32_t num_blocks) {
    (void)num_blocks;
    return Error{"the " + info().name + " backend has no host KV tier"};
  }
};

}  // namespace sluice
