#include "sluice/backend/cuda/device_buffer.h"

#include <algorithm>
#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"

namespace sluice::cuda {

PinnedBuffer::~PinnedBuffer() { cudaFreeHost(data_); }

void* PinnedBuffer::ensure(std::int64_t bytes) {
  if (bytes > capacity_) {
    cudaFreeHost(data_);
    capacity_ = std::max(bytes, 2 * capacity_);
    SLUICE_CUDA_CHECK(cudaMallocHost(&data_, static_cast<std::size_t>(capacity_)));
  }
  return data_;
}

namespace {

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  SLUICE_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// Keeps what stream-ordered frees give back for the next allocation instead
// of returning it to the driver at every synchronisation.
void keep_freed_memory_pooled() {
  static const bool done = [] {
    int device = 0;
    cudaMemPool_t pool = nullptr;
    SLUICE_CUDA_CHECK(cudaGetDevice(&device));
    SLUICE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    std::uint64_t threshold = UINT64_MAX;
    SLUICE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    return true;
  }();
  (void)done;
}

}  // namespace

cudaError_t malloc_in_stream_order(void** data, std::int64_t bytes, cudaStream_t stream) {
  // A capture would turn the allocation into a node of its graph.
  if (capturing(stream)) return cudaMalloc(data, static_cast<std::size_t>(bytes));
  keep_freed_memory_pooled();
  return cudaMallocAsync(data, static_cast<std::size_t>(bytes), stream);
}

void free_in_stream_order(void* data, cudaStream_t stream) {
  if (data == nullptr) return;
  if (capturing(stream)) {
    SLUICE_CUDA_CHECK(cudaFree(data));
    return;
  }
  SLUICE_CUDA_CHECK(cudaFreeAsync(data, stream));
}

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

bool DeviceBuffer::ensure(std::int64_t bytes, cudaStream_t stream) {
  if (bytes <= capacity_) return false;
  free_in_stream_order(data_, stream);
  capacity_ = std::max(bytes, 2 * capacity_);
  SLUICE_CUDA_CHECK(malloc_in_stream_order(&data_, capacity_, stream));
  return true;
}

}  // namespace sluice::cuda
