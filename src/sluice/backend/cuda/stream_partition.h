// A CUDA stream confined to part of the GPU's SMs (a green context), or one
// of high priority: what decodes need to run beside a long prefill chunk
// instead of between its steps (the engine's decode lane, --decode-lane;
// cuda_bench --overlap).
// The driver's green-context calls are looked up at run time through the
// runtime's entry-point query, so nothing links libcuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sluice/common/result.h"

namespace sluice::cuda {

struct StreamPartition {
  // 0: every SM. n > 0: a green context of the first n SMs (rounded up to the
  // driver's group size, 8 on sm_90); n < 0: one of every SM but those -n.
  std::int32_t sms = 0;
  bool high_priority = false;
};

struct PartitionedStream {
  cudaStream_t stream = nullptr;
  std::int32_t num_sms = 0;  // the SMs its kernels may use (waves are planned on them)
};

// A non-blocking stream on `device` as `partition` asks.
Result<PartitionedStream> make_partitioned_stream(int device, const StreamPartition& partition);

}  // namespace sluice::cuda
