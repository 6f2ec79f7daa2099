#include "sluice/backend/cuda/device_buffer.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include <spdlog/spdlog.h>

#include "sluice/backend/cuda/cuda_check.h"

namespace sluice::cuda {

namespace {

// A growth slower than this is logged: a page-locked allocation is an
// implicit synchronisation point, so it may have waited for another lane.
constexpr double kSlowGrowthMs = 5.0;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The current device's stream-order pool, where every allocation here comes from.
cudaMemPool_t default_pool() {
  int device = 0;
  cudaMemPool_t pool = nullptr;
  SLUICE_CUDA_CHECK(cudaGetDevice(&device));
  SLUICE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}

// Keeps what stream-ordered frees give back for the next allocation instead
// of returning it to the driver at every synchronisation, without making
// streams wait for each other.
void keep_freed_memory_pooled() {
  static const bool done = [] {
    cudaMemPool_t pool = default_pool();
    std::uint64_t threshold = UINT64_MAX;
    SLUICE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    // Nor may one lane's allocation reuse memory that the other lane freed
    // behind work still queued: the pool would make the allocating stream
    // wait for the freeing one (a decode step for a prefill chunk). Frees
    // already done are reused either way.
    int no = 0;
    SLUICE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no));
    return true;
  }();
  (void)done;
}

// A stream of its own for allocations made while another stream is being
// captured: an allocation on the captured stream would become a node of its
// graph, and cudaMalloc may wait for every stream of the device.
cudaStream_t allocation_stream() {
  static const cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    SLUICE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  SLUICE_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// The pool keeps what it is given back (keep_freed_memory_pooled), and a freed
// block serves only allocations that fit inside it: a buffer that grew (the
// scratch arena merging its chunks, a DeviceBuffer doubling) leaves its old
// blocks reserved. On running out, hand those back to the driver and try once
// more, as PyTorch's caching allocator does, instead of failing the step.
// `settled` is a stream whose frees may still be pending: they complete first
// (not under a capture, where waiting is not allowed).
cudaError_t malloc_trimming_on_failure(void** data, std::int64_t bytes, cudaStream_t stream,
                                       cudaStream_t settled) {
  cudaError_t status = cudaMallocAsync(data, static_cast<std::size_t>(bytes), stream);
  if (status != cudaErrorMemoryAllocation) return status;
  cudaGetLastError();  // the failure is handled here
  if (settled != nullptr) SLUICE_CUDA_CHECK(cudaStreamSynchronize(settled));
  cudaMemPool_t pool = default_pool();
  std::uint64_t reserved = 0, used = 0;
  SLUICE_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  SLUICE_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  SLUICE_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  status = cudaMallocAsync(data, static_cast<std::size_t>(bytes), stream);
  if (status != cudaSuccess) cudaGetLastError();
  spdlog::warn("device memory: an allocation of {:.2f} GiB failed with {:.2f} GiB reserved by the pool, {:.2f} GiB "
               "of it in use; the unused rest handed back, the retry {}",
               bytes / 1073741824.0, reserved / 1073741824.0, used / 1073741824.0,
               status == cudaSuccess ? "succeeded" : "failed too");
  return status;
}

}  // namespace

PinnedBuffer::~PinnedBuffer() {
  for (void* p : retired_) cudaFreeHost(p);
  cudaFreeHost(data_);
}

void* PinnedBuffer::ensure(std::int64_t bytes) {
  if (bytes > capacity_) {
    const auto start = std::chrono::steady_clock::now();
    // cudaFreeHost waits for every stream of the device, i.e. for the other
    // lane's step: the old buffer is kept until teardown instead (growth
    // doubles, so they add up to less than the live one).
    if (data_ != nullptr) retired_.push_back(data_);
    const std::int64_t old_capacity = capacity_;
    capacity_ = std::max({bytes, 2 * capacity_, kMinPinnedBytes});
    SLUICE_CUDA_CHECK(cudaMallocHost(&data_, static_cast<std::size_t>(capacity_)));
    if (const double ms = ms_since(start); ms > kSlowGrowthMs)
      spdlog::warn("a pinned step buffer grew from {} to {} bytes in {:.1f} ms", old_capacity, capacity_, ms);
  }
  return data_;
}

cudaError_t malloc_in_stream_order(void** data, std::int64_t bytes, cudaStream_t stream) {
  keep_freed_memory_pooled();
  if (!capturing(stream)) return malloc_trimming_on_failure(data, bytes, stream, stream);
  // From the same pool, on the allocation stream, complete before the
  // captured kernels can use it.
  const auto start = std::chrono::steady_clock::now();
  const cudaError_t status = malloc_trimming_on_failure(data, bytes, allocation_stream(), nullptr);
  if (status != cudaSuccess) return status;
  const cudaError_t synced = cudaStreamSynchronize(allocation_stream());
  if (const double ms = ms_since(start); ms > kSlowGrowthMs)
    spdlog::warn("a device allocation of {} bytes during a graph capture took {:.1f} ms", bytes, ms);
  return synced;
}

void free_in_stream_order(void* data, cudaStream_t stream) {
  if (data == nullptr) return;
  // A free under a capture would become a node of the graph; the buffers
  // that grow under one (DeviceBuffer) free after it.
  SLUICE_CHECK_MSG(!capturing(stream), "free_in_stream_order on a stream being captured");
  SLUICE_CUDA_CHECK(cudaFreeAsync(data, stream));
}

// Teardown: the owner has synchronised its stream.
DeviceBuffer::~DeviceBuffer() {
  for (void* p : retired_) cudaFree(p);
  cudaFree(data_);
}

bool DeviceBuffer::ensure(std::int64_t bytes, cudaStream_t stream) {
  if (bytes <= capacity_ && retired_.empty()) return false;
  const bool captured = capturing(stream);
  if (!captured) {
    for (void* p : retired_) free_in_stream_order(p, stream);
    retired_.clear();
  }
  if (bytes <= capacity_) return false;
  if (captured) {
    if (data_ != nullptr) retired_.push_back(data_);
  } else {
    free_in_stream_order(data_, stream);
  }
  // Doubling keeps growth rare; where twice the old size does not fit, the
  // size asked for may.
  const std::int64_t doubled = std::max(bytes, 2 * capacity_);
  capacity_ = doubled > bytes && malloc_in_stream_order(&data_, doubled, stream) == cudaSuccess ? doubled : bytes;
  if (capacity_ == bytes) SLUICE_CUDA_CHECK(malloc_in_stream_order(&data_, bytes, stream));
  return true;
}

}  // namespace sluice::cuda
