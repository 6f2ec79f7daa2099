// Buffers that grow and never shrink: pinned host memory the device copies
// from and to asynchronously, and device memory for per-step data (the
// step's metadata, the sampler's parameters and results). Steps repeat their
// sizes, so after the first few nothing is allocated on the step's path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace sluice::cuda {

// Device allocations and the sections packed into them start on this boundary.
inline constexpr std::int64_t kDeviceAlignBytes = 256;
constexpr std::int64_t align_up(std::int64_t n, std::int64_t a) { return (n + a - 1) / a * a; }

// Device memory allocated and freed in a stream's order (the default memory
// pool): unlike cudaMalloc/cudaFree, which wait for every stream of the
// device, they never hold one lane's step behind another's (two step loops,
// engine_core.h). Under a capture the allocation comes from the same pool on
// a stream of its own, and a free is an error (DeviceBuffer frees after).
// When the device is out of memory, the pool's unused blocks go back to the
// driver and the allocation is tried once more (logged).
cudaError_t malloc_in_stream_order(void** data, std::int64_t bytes, cudaStream_t stream);
void free_in_stream_order(void* data, cudaStream_t stream);

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // At least `bytes` (at least kMinPinnedBytes); the contents are not kept
  // when it grows.
  void* ensure(std::int64_t bytes);

 private:
  // Most steps' metadata fits from the first, so few steps page-lock memory.
  static constexpr std::int64_t kMinPinnedBytes = 1 << 20;
  void* data_ = nullptr;
  std::int64_t capacity_ = 0;
  std::vector<void*> retired_;  // outgrown, freed at teardown
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Makes it at least `bytes` (twice the old size when it grows and that
  // fits, else `bytes`; contents are not kept), the old one freed in
  // `stream`'s order. True when the address changed.
  bool ensure(std::int64_t bytes, cudaStream_t stream);
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  std::int64_t capacity_ = 0;
  std::vector<void*> retired_;  // outgrown under a capture, freed at the next ensure outside one
};

}  // namespace sluice::cuda
