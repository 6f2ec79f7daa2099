// CudaOps::sample: chooses each row's token from the step's logits with one
// read-back. Plain greedy rows are decided by the argmax kernel (12 bytes back
// a row). Every other row but those returning logits goes through the device
// sampler (kernels/sampling_topk.cu: 172 bytes back a row), which chooses the
// token the reference sampler does (tests/cuda/sampling_test.cpp). Rows
// returning logits or asking for more than kMaxDeviceTopLogprobs top logprobs
// come back as f32 and go through the reference sampler on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "sluice/backend/cuda/device_buffer.h"
#include "sluice/backend/cuda/sample_pack.h"
#include "sluice/backend/ops.h"

namespace sluice::cuda {

class StepSampler {
 public:
  explicit StepSampler(cudaStream_t stream) : stream_(stream) {}

  // logits: [requests.size(), vocab], bf16 or f32, on the device. Waits for
  // the stream (the host needs the tokens).
  std::vector<SampleResult> sample(const Tensor& logits, std::span<const SampleRequest> requests);

 private:
  cudaStream_t stream_;
  PinnedBuffer readback_host_;  // greedy results, device results, f32 rows for the host
  PinnedBuffer upload_host_;    // the pack, on its way to the device
  DeviceSamplePack pack_;
  // One allocation a call: the read-back sections, then the pack and the
  // device sampler's workspace.
  DeviceBuffer device_;
};

}  // namespace sluice::cuda
