// The driver's cuTensorMapEncodeTiled (tma.cuh's encode_tensor_map), looked up
// once for every kernel that builds tensor maps on the host: the runtime does
// not export it. Also the e4m3 row maps both grouped FP8 GEMMs build.
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

CUtensorMap e4m3_rows_tensor_map(const void* base, std::int64_t rows, std::int64_t cols, int box_rows,
                                 CUtensorMapL2promotion promotion) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols)};
  const cuuint32_t box[2] = {kE4m3RowBoxBytes, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = encode_tensor_map()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims,
                                              strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                              CU_TENSOR_MAP_SWIZZLE_128B, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SLUICE_CHECK_MSG(result == CUDA_SUCCESS, "e4m3 row tensor map: cuTensorMapEncodeTiled failed");
  return map;
}

E4m3RowBoxes e4m3_row_boxes(const void* base, std::int64_t rows, std::int64_t cols, CUtensorMapL2promotion promotion) {
  E4m3RowBoxes boxes{};
  for (int i = 0; i < E4m3RowBoxes::kBoxes; ++i)
    boxes.box[i] = e4m3_rows_tensor_map(base, rows, cols, E4m3RowBoxes::kMaxRows >> i, promotion);
  return boxes;
}

}  // namespace sluice::cuda
