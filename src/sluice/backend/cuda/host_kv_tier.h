// HostKvTier: the CUDA backend's host KV tier. Host blocks live in one pinned
// buffer (cudaHostAlloc), [host block][layer][K, V][block_size, kv_heads,
// head_dim] bf16 (a model-defined cache, DeepSeek-V4's: one f32 area a
// block, byte for byte the CPU's, so one piece a block). Copies run on a stream of their own, so they overlap the
// forward on the compute stream:
//   - each batch of copies first waits (cudaStreamWaitEvent) for everything
//     already on the compute stream, so a store reads what earlier steps
//     wrote and a load lands after earlier steps stopped using its block;
//   - one event is recorded after each batch; completions are read with
//     cudaEventQuery, oldest first (one stream: batches finish in order).
// A block's 2 x num_layers pieces (K0 V0 K1 V1 ..., each block_size x
// kv_heads x head_dim) sit one layer slab apart on the device and back to back
// on the host. HostCopyMethod says how they are issued: one cudaMemcpy2DAsync
// per block (64 rows of 32 KiB for Llama-3-8B: one API call a block), or every
// piece of a batch in one cudaMemcpyBatchAsync (CUDA 12.8+; one call a batch,
// so the engine thread's issue cost stops growing with the blocks).
// tools/device/host_tier_bench.sh measures both against a plain pinned copy.
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

enum class HostCopyMethod : std::uint8_t { kPerBlock2d, kBatched };

class HostKvTier {
 public:
  explicit HostKvTier(HostCopyMethod method = HostCopyMethod::kPerBlock2d) : method_(method) {}
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
  // Enqueues one block's pieces (the 2D method) or adds them to the batch's lists.
  Status issue(const KvBlockCopy& c);
  Status issue_batched();

  void* host_kv_ = nullptr;           // pinned, [num_blocks][2 * num_layers][block elems] bf16
  void* device_kv_ = nullptr;         // not owned
  std::int32_t num_host_blocks_ = 0;
  std::int32_t num_device_blocks_ = 0;
  std::size_t piece_bytes_ = 0;       // one layer's K (or V) of one block
  std::size_t device_slab_bytes_ = 0; // one layer's K (or V) of every block: the device pitch
  std::int32_t num_pieces_ = 0;       // 2 x num_layers
  HostCopyMethod method_;
  std::vector<void*> batch_dsts_, batch_srcs_;  // kBatched: this call's pieces
  std::vector<std::size_t> batch_sizes_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;  // the compute stream's work so far, for the copy stream to wait on
  std::deque<Batch> in_flight_;         // oldest first
  std::unordered_set<KvCopyId> in_flight_ids_;
};

}  // namespace sluice::cuda
