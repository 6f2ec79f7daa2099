// Backend: runs Batches. The CPU and CUDA backends compute them through an Ops
// implementation and a model architecture; the sim backend only advances a clock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "sluice/backend/batch.h"
#include "sluice/common/backend_info.h"

namespace sluice {

// How a lane (Backend::make_lane) shares the device with the backend it was
// made from: the engine's decode lane runs the decodes on it, beside the
// prefill chunks of the other (docs/architecture.md, "Decodes beside prefill").
struct LaneOptions {
  // Its stream at the device's highest priority: its kernels' blocks are
  // dispatched ahead of the other stream's waiting ones.
  bool high_priority = false;
  // > 0: its stream confined to this many SMs (a green context; the backend
  // it was made from should then run on the others). 0: every SM.
  std::int32_t num_sms = 0;
  // The engine starts the lane's steps at least this far apart (its pace,
  // EngineConfig::decode_lane_interval_ms; 0: back to back). A backend that
  // prices time (the sim) prices the other lane's contention with it.
  double step_interval_ms = 0.0;
};

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
  // (optional) Free device memory now (the first rank's device), for the
  // start-up log; nullopt where the backend has no device memory.
  virtual std::optional<std::int64_t> device_memory_free_bytes() const { return std::nullopt; }
  // (optional) A second backend over this one's weights and KV pages, with
  // its own stream, scratch and graphs: it may execute a batch while this one
  // executes another, on another thread, when the two batches' sequences are
  // disjoint and no block one writes is another's. Its info() is this one's.
  // It copies no KV (no host tier) and must be destroyed before this one.
  virtual Result<std::unique_ptr<Backend>> make_lane(const LaneOptions& options) {
    (void)options;
    return Error{"the " + info().name + " backend cannot run two step loops"};
  }
};

}  // namespace sluice
