// Backend: runs Batches. The CPU and CUDA backends compute them through an Ops
// implementation and a model architecture; the sim backend only advances a clock.
#pragma once

#include "sluice/backend/batch.h"
#include "sluice/common/backend_info.h"

namespace sluice {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const BackendInfo& info() const = 0;
  // Runs one step. A failure here fails the step's requests, not the engine.
  virtual Result<StepOutput> execute(const Batch& batch) = 0;
};

}  // namespace sluice
