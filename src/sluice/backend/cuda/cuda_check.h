// CUDA and cuBLASLt return codes as invariants: a failing call inside a step
// is a bug or a dead device, never bad user input, so it aborts with the
// location and the library's message. Fallible setup (allocation) returns
// Result instead and does not use these.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "sluice/common/check.h"

#define SLUICE_CUDA_CHECK(expr)                                                           \
  do {                                                                                    \
    const cudaError_t sluice_cuda_status_ = (expr);                                       \
    if (sluice_cuda_status_ != cudaSuccess)                                               \
      ::sluice::check_failed(#expr, cudaGetErrorString(sluice_cuda_status_),              \
                             std::source_location::current());                            \
  } while (0)

#define SLUICE_CUBLAS_CHECK(expr)                                                         \
  do {                                                                                    \
    const cublasStatus_t sluice_cublas_status_ = (expr);                                  \
    if (sluice_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                   \
      ::sluice::check_failed(#expr, cublasLtGetStatusString(sluice_cublas_status_),       \
                             std::source_location::current());                            \
  } while (0)

// After every kernel launch: catches bad launch configurations at their source.
#define SLUICE_CUDA_CHECK_LAUNCH() SLUICE_CUDA_CHECK(cudaGetLastError())
