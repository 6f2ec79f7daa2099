#include "sluice/backend/cuda/rope_frequencies.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/rope.h"

namespace sluice::cuda {

RopeFrequencies::~RopeFrequencies() {
  for (auto& [key, p] : tables_) cudaFree(p);
}

const float* RopeFrequencies::inverse_frequencies(const RopeParams& params) {
  const Key key = std::make_tuple(params.head_dim, params.theta, params.llama3_factor, params.llama3_low_freq_factor,
                                  params.llama3_high_freq_factor, params.llama3_original_max_position,
                                  params.yarn_factor, params.yarn_original_max_position, params.yarn_beta_fast,
                                  params.yarn_beta_slow, params.yarn_truncate);
  if (auto it = tables_.find(key); it != tables_.end()) return it->second;
  const std::vector<float> host = rope_inverse_frequencies(params);
  float* device = nullptr;
  SLUICE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device), host.size() * sizeof(float)));
  SLUICE_CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  // A pageable copy may return before its bytes land, and the caller's
  // kernels run next on a non-blocking stream that does not wait for the
  // legacy one. (Legal during a relaxed-mode capture of that stream.)
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  tables_.emplace(key, device);
  return device;
}

}  // namespace sluice::cuda
