// The driver's cuTensorMapEncodeTiled (tma.cuh's encode_tensor_map), looked up
// once for every kernel that builds tensor maps on the host: the runtime does
// not export it.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/tma.cuh"

namespace sluice::cuda {

PFN_cuTensorMapEncodeTiled_v12000 encode_tensor_map() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    cudaDriverEntryPointQueryResult found{};
    void* fn = nullptr;
    SLUICE_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    SLUICE_CHECK_MSG(found == cudaDriverEntryPointSuccess && fn != nullptr,
                     "TMA: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace sluice::cuda
