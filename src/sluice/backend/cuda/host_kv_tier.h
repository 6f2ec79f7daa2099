// HostKvTier: the CUDA backend's host KV tier. Host blocks live in one pinned
// buffer (cudaHostAlloc), [host block][layer][K, V][block_size, kv_heads,
// head_dim] bf16. Copies run on a stream of their own, so they overlap the
// forward on the compute stream:
//   - each batch of copies first waits (cudaStreamWaitEvent) for everything
//     already on the compute stream, so a store reads what earlier steps
//     wrote and a load lands after earlier steps stopped using its block;
//   - one event is recorded after each batch; completions are read with
//     cudaEventQuery, oldest first (one stream: batches finish in order).
// One block is one cudaMemcpy2DAsync: its 2 x num_layers pieces sit one layer
// slab apart on the device (K0 V0 K1 V1 ...) and back to back on the host.
// The engine keeps a copy's blocks out of every step until its completion is
// reported, so the forward never waits for a copy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_set>
#include <vector>

#include "sluice/backend/ops.h"

namespace sluice::cuda {

class HostKvTier {
 public:
  HostKvTier() = default;
  ~HostKvTier();
  HostKvTier(const HostKvTier&) = delete;
  HostKvTier& operator=(const HostKvTier&) = delete;

  // device_kv: the paged cache (cuda_ops.cpp's layout), spec its geometry.
  [[nodiscard]] Status allocate(std::int32_t num_blocks, const KvCacheSpec& spec, void* device_kv);
  bool allocated() const { return host_kv_ != nullptr; }
  // Waits for every copy in flight (before the device cache is freed).
  void drain() {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  }
  // Ops::copy_kv_blocks on `compute_stream`'s device.
  Result<std::vector<KvCopyCompletion>> copy(std::span<const KvBlockCopy> copies, bool wait_for_one,
                                             cudaStream_t compute_stream);

 private:
  struct Batch {
    std::vector<KvCopyId> ids;
    cudaEvent_t done = nullptr;
  };
  std::vector<KvCopyCompletion> take_completed();

  void* host_kv_ = nullptr;           // pinned, [num_blocks][2 * num_layers][block elems] bf16
  void* device_kv_ = nullptr;         // not owned
  std::int32_t num_host_blocks_ = 0;
  std::int32_t num_device_blocks_ = 0;
  std::size_t piece_bytes_ = 0;       // one layer's K (or V) of one block
  std::size_t device_slab_bytes_ = 0; // one layer's K (or V) of every block: the device pitch
  std::int32_t num_pieces_ = 0;       // 2 x num_layers
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;  // the compute stream's work so far, for the copy stream to wait on
  std::deque<Batch> in_flight_;         // oldest first
  std::unordered_set<KvCopyId> in_flight_ids_;
};

}  // namespace sluice::cuda
