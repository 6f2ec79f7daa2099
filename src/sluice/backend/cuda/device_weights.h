// The model's weights on the device: uploaded from host tensors (converted to
// the dtype the kernels read: matrices bf16, vectors keep theirs) through one
// pinned staging buffer, owned until the Ops goes. Allocation failures are
// results (the model may not fit); everything else is an invariant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "sluice/backend/cuda/device_buffer.h"
#include "sluice/backend/tensor.h"
#include "sluice/common/result.h"

namespace sluice::cuda {

class DeviceWeights {
 public:
  explicit DeviceWeights(cudaStream_t stream) : stream_(stream) {}
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // The parts stacked along their rows (vectors: concatenated) in one device
  // tensor; matrices (rank >= 2) become bf16, vectors keep their dtype. FP8
  // weights with block scales stay FP8, their scales stacked into one grid
  // padded as cuBLASLt reads it (lt_gemm.h). Waits for the copies.
  [[nodiscard]] Result<Tensor> upload(std::span<const Tensor> parts);
  // `bytes` of device memory owned here; `what` names it in the error.
  [[nodiscard]] Result<void*> allocate(std::int64_t bytes, const char* what);

 private:
  // FP8 parts and their scales, unconverted.
  [[nodiscard]] Result<Tensor> upload_fp8(std::span<const Tensor> parts);
  // Host tensor -> device, converted to `target`, in chunks through the staging buffer.
  void copy_converted(const Tensor& host, DType target, void* device);

  cudaStream_t stream_;
  std::vector<void*> allocations_;
  PinnedBuffer staging_;
};

}  // namespace sluice::cuda
