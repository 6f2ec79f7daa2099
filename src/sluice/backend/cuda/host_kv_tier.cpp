#include "sluice/backend/cuda/host_kv_tier.h"

#include <fmt/format.h>

#include "sluice/backend/cuda/cuda_check.h"

namespace sluice::cuda {

HostKvTier::~HostKvTier() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (Batch& b : in_flight_) cudaEventDestroy(b.done);
  if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (host_kv_ != nullptr) cudaFreeHost(host_kv_);
}

Status HostKvTier::allocate(std::int32_t num_blocks, const KvCacheSpec& spec, void* device_kv) {
  if (host_kv_ != nullptr) return Error{"CUDA backend: the host KV tier is allocated once"};
  if (device_kv == nullptr || spec.layout != KvCacheLayout::key_value || num_blocks < 1)
    return Error{"CUDA backend: a host KV tier needs the paged K/V cache allocated first"};
  piece_bytes_ = static_cast<std::size_t>(spec.block_size_tokens) * static_cast<std::size_t>(spec.num_kv_heads) *
                 static_cast<std::size_t>(spec.head_dim) * sizeof(std::uint16_t);
  device_slab_bytes_ = piece_bytes_ * static_cast<std::size_t>(spec.num_blocks);
  num_pieces_ = 2 * spec.num_layers;
  const std::size_t bytes = piece_bytes_ * static_cast<std::size_t>(num_pieces_) * static_cast<std::size_t>(num_blocks);
  if (cudaHostAlloc(&host_kv_, bytes, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    host_kv_ = nullptr;
    return Error{fmt::format("CUDA backend: cannot pin {:.2f} GiB of host memory for the host KV tier",
                             static_cast<double>(bytes) / 1073741824.0)};
  }
  device_kv_ = device_kv;
  num_host_blocks_ = num_blocks;
  num_device_blocks_ = spec.num_blocks;
  SLUICE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  SLUICE_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
  return Ok{};
}

std::vector<KvCopyCompletion> HostKvTier::take_completed() {
  std::vector<KvCopyCompletion> done;
  while (!in_flight_.empty()) {
    const cudaError_t status = cudaEventQuery(in_flight_.front().done);
    if (status == cudaErrorNotReady) break;
    SLUICE_CUDA_CHECK(status);
    for (KvCopyId id : in_flight_.front().ids) {
      done.push_back({.id = id});
      in_flight_ids_.erase(id);
    }
    SLUICE_CUDA_CHECK(cudaEventDestroy(in_flight_.front().done));
    in_flight_.pop_front();
  }
  return done;
}

Result<std::vector<KvCopyCompletion>> HostKvTier::copy(std::span<const KvBlockCopy> copies, bool wait_for_one,
                                                       cudaStream_t compute_stream) {
  if (host_kv_ == nullptr && !copies.empty()) return Error{"CUDA backend: KV copies without a host KV tier"};
  Batch batch;
  for (const KvBlockCopy& c : copies) {
    if (in_flight_ids_.contains(c.id)) continue;  // a retry of a copy already running
    if (c.host_block < 0 || c.host_block >= num_host_blocks_ || c.device_block < 0 ||
        c.device_block >= num_device_blocks_) {
      return Error{fmt::format("CUDA backend: KV copy {} names a block outside the pools", c.id)};
    }
    if (batch.ids.empty()) {
      SLUICE_CUDA_CHECK(cudaEventRecord(compute_done_, compute_stream));
      SLUICE_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_done_, 0));
    }
    auto* device = static_cast<std::byte*>(device_kv_) + static_cast<std::size_t>(c.device_block) * piece_bytes_;
    auto* host = static_cast<std::byte*>(host_kv_) +
                 static_cast<std::size_t>(c.host_block) * piece_bytes_ * static_cast<std::size_t>(num_pieces_);
    if (c.direction == KvCopyDirection::kDeviceToHost) {
      SLUICE_CUDA_CHECK(cudaMemcpy2DAsync(host, piece_bytes_, device, device_slab_bytes_, piece_bytes_,
                                          static_cast<std::size_t>(num_pieces_), cudaMemcpyDeviceToHost, stream_));
    } else {
      SLUICE_CUDA_CHECK(cudaMemcpy2DAsync(device, device_slab_bytes_, host, piece_bytes_, piece_bytes_,
                                          static_cast<std::size_t>(num_pieces_), cudaMemcpyHostToDevice, stream_));
    }
    batch.ids.push_back(c.id);
    in_flight_ids_.insert(c.id);
  }
  if (!batch.ids.empty()) {
    SLUICE_CUDA_CHECK(cudaEventCreateWithFlags(&batch.done, cudaEventDisableTiming));
    SLUICE_CUDA_CHECK(cudaEventRecord(batch.done, stream_));
    in_flight_.push_back(std::move(batch));
  }
  if (wait_for_one && !in_flight_.empty()) SLUICE_CUDA_CHECK(cudaEventSynchronize(in_flight_.front().done));
  return take_completed();
}

}  // namespace sluice::cuda
