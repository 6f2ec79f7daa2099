// The step's integer metadata on the device: token ids, positions, each
// sequence's rows and block table, and the attention work lists (prefill query
// tiles, split-KV rows, split prefill pieces), packed into one pinned buffer
// and sent with a single copy per step; the kernels read it through a
// StepDeviceView. Under a decode graph every section has a capacity fixed by
// the graph's key, so each replay finds its data at the captured addresses.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "sluice/backend/cuda/decode_graphs.h"
#include "sluice/backend/cuda/device_buffer.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/ops.h"

namespace sluice::cuda {

// What the attention work lists depend on besides the layout.
struct StepAttentionShape {
  std::int32_t head_dim = 0;     // the KV cache's; 0 before it exists (no prefill tiles then)
  std::int32_t num_q_heads = 0;  // query heads a split prefill tile is cut for
  std::int32_t num_sms = 0;
};

class StepMetadata {
 public:
  explicit StepMetadata(cudaStream_t stream);
  ~StepMetadata();
  StepMetadata(const StepMetadata&) = delete;
  StepMetadata& operator=(const StepMetadata&) = delete;

  // Uploads `layout` (sized for `graph`'s buckets when the step is captured or
  // replayed) and returns the view of the device copy, valid until the next upload.
  const StepDeviceView& upload(const StepLayout& layout, const StepAttentionShape& shape,
                               const std::optional<GraphKey>& graph);
  // Bumped whenever the device buffer moves: captured graphs hold its address.
  std::uint64_t generation() const { return generation_; }

 private:
  // 16 sequences of 128k tokens in blocks of 16 take 512 KiB of block tables.
  static constexpr std::int64_t kReservedBytes = 4 << 20;
  cudaStream_t stream_;
  PinnedBuffer host_;
  DeviceBuffer device_;
  cudaEvent_t upload_done_ = nullptr;  // the previous step's copy has left host_
  StepDeviceView view_;
  std::uint64_t generation_ = 0;
};

}  // namespace sluice::cuda
