// Host-side kernel launch with programmatic dependent launch (PDL): the
// kernel may start while the previous kernel of the stream finishes its last
// wave, and waits for it inside (pdl_wait() in common.cuh). In a decode step
// of ~400 small kernels this hides most of each kernel's launch and ramp-up;
// the GEMV prefetches its first weights before the wait. Works eagerly and
// under stream capture (the graph keeps programmatic edges). Set
// SLUICE_CUDA_PDL=0 to launch every kernel plainly.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {

// `programmatic`: whether this launch may overlap the previous kernel.
template <class... Params, class... Args>
void launch_kernel_with(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block,
                        std::size_t smem_bytes, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = programmatic ? 1 : 0;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  SLUICE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem_bytes,
                   cudaStream_t stream, Args... args) {
  launch_kernel_with(pdl_enabled(), kernel, grid, block, smem_bytes, stream, args...);
}

}  // namespace sluice::cuda
