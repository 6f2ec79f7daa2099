// bf16 GEMMs through cuBLASLt with f32 accumulation, for weights in the
// Hugging Face [N, K] layout: out[M, N] = x[M, K] · w[N, K]^T.
//
// Row-major out^T is column-major out, so this is cuBLAS's "TN" product
// C[N, M] = W^T(T) · X^T. A plan (descriptors + the heuristic's first algorithm)
// is cached per (M, N, K, out dtype): prefill sizes vary, decode sizes repeat.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "sluice/backend/tensor.h"

namespace sluice::cuda {

class LtGemm {
 public:
  LtGemm(cudaStream_t stream, std::int64_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // x: bf16 [m, k], w: bf16 [n, k], out: bf16 or f32 [m, n].
  void run(const void* x, const void* w, void* out, DType out_dtype, std::int64_t m,
           std::int64_t n, std::int64_t k);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, DType>;
  const Plan& plan_for(std::int64_t m, std::int64_t n, std::int64_t k, DType out_dtype);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::int64_t workspace_bytes_;
  std::map<Key, Plan> plans_;
};

}  // namespace sluice::cuda
