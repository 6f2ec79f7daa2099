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
  const bool model_defined = spec.layout == KvCacheLayout::model_defined;
  if (device_kv == nullptr || (spec.layout != KvCacheLayout::key_value && !model_defined) || num_blocks < 1)
    return Error{"CUDA backend: a host KV tier needs the paged K/V (or model-defined) cache allocated first"};
  // K/V: bf16 pieces, K and V of every layer one slab apart. Model-defined
  // (DeepSeek-V4): one f32 area a block, the CPU's bytes, one piece.
  piece_bytes_ = static_cast<std::size_t>(spec.block_size_tokens) * static_cast<std::size_t>(spec.num_kv_heads) *
                 static_cast<std::size_t>(spec.head_dim) * (model_defined ? sizeof(float) : sizeof(std::uint16_t));
  device_slab_bytes_ = piece_bytes_ * static_cast<std::size_t>(spec.num_blocks);
  num_pieces_ = model_defined ? 1 : 2 * spec.num_layers;
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

Status HostKvTier::issue(const KvBlockCopy& c) {
  auto* device = static_cast<std::byte*>(device_kv_) + static_cast<std::size_t>(c.device_block) * piece_bytes_;
  auto* host = static_cast<std::byte*>(host_kv_) +
               static_cast<std::size_t>(c.host_block) * piece_bytes_ * static_cast<std::size_t>(num_pieces_);
  const bool to_host = c.direction == KvCopyDirection::kDeviceToHost;
  if (method_ == HostCopyMethod::kBatched) {
    for (std::int32_t p = 0; p < num_pieces_; ++p) {
      std::byte* device_piece = device + static_cast<std::size_t>(p) * device_slab_bytes_;
      std::byte* host_piece = host + static_cast<std::size_t>(p) * piece_bytes_;
      batch_dsts_.push_back(to_host ? host_piece : device_piece);
      batch_srcs_.push_back(to_host ? device_piece : host_piece);
      batch_sizes_.push_back(piece_bytes_);
    }
    return Ok{};
  }
  if (to_host) {
    SLUICE_CUDA_CHECK(cudaMemcpy2DAsync(host, piece_bytes_, device, device_slab_bytes_, piece_bytes_,
                                        static_cast<std::size_t>(num_pieces_), cudaMemcpyDeviceToHost, stream_));
  } else {
    SLUICE_CUDA_CHECK(cudaMemcpy2DAsync(device, device_slab_bytes_, host, piece_bytes_, piece_bytes_,
                                        static_cast<std::size_t>(num_pieces_), cudaMemcpyHostToDevice, stream_));
  }
  return Ok{};
}

Status HostKvTier::issue_batched() {
  if (batch_dsts_.empty()) return Ok{};  // the 2D method issued as it went
  // Stream order: the copies read their sources only after the work before
  // them on the copy stream (the wait for the compute stream) is done.
  cudaMemcpyAttributes attributes{};
  attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attributes.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  std::size_t attribute_index = 0;
  const cudaError_t status = cudaMemcpyBatchAsync(batch_dsts_.data(), batch_srcs_.data(), batch_sizes_.data(),
                                                  batch_dsts_.size(), &attributes, &attribute_index, 1, stream_);
  batch_dsts_.clear();
  batch_srcs_.clear();
  batch_sizes_.clear();
  if (status != cudaSuccess) {
    cudaGetLastError();
    return Error{fmt::format("CUDA backend: cudaMemcpyBatchAsync of KV blocks failed: {}", cudaGetErrorString(status))};
  }
  return Ok{};
}

Result<std::vector<KvCopyCompletion>> HostKvTier::copy(std::span<const KvBlockCopy> copies, bool wait_for_one,
                                                       cudaStream_t compute_stream) {
  if (host_kv_ == nullptr && !copies.empty()) return Error{"CUDA backend: KV copies without a host KV tier"};
  // All or nothing: a refused call starts no copy, so its retry finds none in flight.
  for (const KvBlockCopy& c : copies) {
    if (c.host_block < 0 || c.host_block >= num_host_blocks_ || c.device_block < 0 ||
        c.device_block >= num_device_blocks_) {
      return Error{fmt::format("CUDA backend: KV copy {} names a block outside the pools", c.id)};
    }
  }
  Batch batch;
  for (const KvBlockCopy& c : copies) {
    if (in_flight_ids_.contains(c.id)) continue;  // a retry of a copy already running
    if (batch.ids.empty()) {
      SLUICE_CUDA_CHECK(cudaEventRecord(compute_done_, compute_stream));
      SLUICE_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_done_, 0));
    }
    SLUICE_TRY(issue(c));
    batch.ids.push_back(c.id);
  }
  if (!batch.ids.empty()) {
    SLUICE_TRY(issue_batched());
    SLUICE_CUDA_CHECK(cudaEventCreateWithFlags(&batch.done, cudaEventDisableTiming));
    SLUICE_CUDA_CHECK(cudaEventRecord(batch.done, stream_));
    in_flight_ids_.insert(batch.ids.begin(), batch.ids.end());
    in_flight_.push_back(std::move(batch));
  }
  if (wait_for_one && !in_flight_.empty()) SLUICE_CUDA_CHECK(cudaEventSynchronize(in_flight_.front().done));
  return take_completed();
}

}  // namespace sluice::cuda
