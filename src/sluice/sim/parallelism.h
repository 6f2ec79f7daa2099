// Parallelism: how one model instance is spread over GPUs.
#pragma once

#include <cstdint>

#include "sluice/common/result.h"
#include "sluice/sim/model_profile.h"

namespace sluice::sim {

struct Parallelism {
  std::int32_t num_gpus = 1;
  std::int32_t tensor_parallel = 1;  // attention heads and dense weights split this many ways
  std::int32_t expert_parallel = 1;  // routed experts split across this many GPUs (1: TP-sharded)

  // Attention replicas: num_gpus / tensor_parallel; each holds its own sequences.
  std::int32_t data_parallel() const { return num_gpus / tensor_parallel; }
};

// User input: every combination the cost model cannot honour is an error
// naming the flag (dense model with EP, TP above the head count, ...).
Status validate(const Parallelism& parallelism, const ModelProfile& profile);

}  // namespace sluice::sim
