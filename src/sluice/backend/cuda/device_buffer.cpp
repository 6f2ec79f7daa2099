#include "sluice/backend/cuda/device_buffer.h"

#include <algorithm>

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

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

bool DeviceBuffer::ensure(std::int64_t bytes, cudaStream_t stream) {
  if (bytes <= capacity_) return false;
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream));
  SLUICE_CUDA_CHECK(cudaFree(data_));
  capacity_ = std::max(bytes, 2 * capacity_);
  SLUICE_CUDA_CHECK(cudaMalloc(&data_, static_cast<std::size_t>(capacity_)));
  return true;
}

}  // namespace sluice::cuda
