// RoPE inverse frequencies on the device, one table per RoPE configuration
// (a model has one; the tests several), made on first use and kept: the RoPE
// kernels read [head_dim / 2] f32 values computed on the host exactly as the
// CPU reference computes them (backend/rope.h).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include "sluice/backend/ops.h"

namespace sluice::cuda {

class RopeFrequencies {
 public:
  RopeFrequencies() = default;
  ~RopeFrequencies();
  RopeFrequencies(const RopeFrequencies&) = delete;
  RopeFrequencies& operator=(const RopeFrequencies&) = delete;

  // Device [params.head_dim / 2] f32.
  const float* inverse_frequencies(const RopeParams& params);

 private:
  // Every field rope_inverse_frequencies() reads.
  using Key = std::tuple<std::int32_t, float, float, float, float, std::int32_t, float, std::int32_t, float, float,
                         bool>;
  std::map<Key, float*> tables_;
};

}  // namespace sluice::cuda
