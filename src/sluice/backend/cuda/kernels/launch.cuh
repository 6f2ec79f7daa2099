// Host-side kernel launch with programmatic dependent launch (PDL): the
// kernel may start while the previous kernel of the stream finishes its last
// wave, and waits for it inside (pdl_wait() in common.cuh). In a decode step
// of ~400 small kernels this hides most of each kernel's launch and ramp-up;
// the GEMV prefetches its first weights before the wait. Works eagerly and
// under stream capture (the graph keeps programmatic edges). Launch's
// `programmatic` (CudaOptions::programmatic_launch) turns it off for every
// kernel launched here.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem_bytes, const Launch& launch,
                   Args... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = launch.programmatic ? 1 : 0;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = launch.stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  SLUICE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

}  // namespace sluice::cuda
