// Strided-batched bf16 GEMMs through cuBLASLt with f32 accumulation, for the
// per-head products of MLA's absorbed decode (q_nope . W_UK_h and
// o_latent . W_UV_h^T over every head at once). Described in cuBLAS's
// column-major terms: for b in [0, batch), C_b[m, n] = op(A_b) . B_b with
// op(A_b) = A_b ([m, k], lda) or A_b^T (A_b stored [k, m], lda), B_b stored
// [k, n] (ldb), C_b [m, n] (ldc); operand b starts stride_* elements after
// operand b - 1. All bf16. A plan is cached per shape (decode repeats them).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <map>

namespace sluice::cuda {

struct BatchedGemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  std::int32_t batch = 1;
  auto operator<=>(const BatchedGemmShape&) const = default;
};

class LtBatchedGemm {
 public:
  explicit LtBatchedGemm(cudaStream_t stream);
  ~LtBatchedGemm();
  LtBatchedGemm(const LtBatchedGemm&) = delete;
  LtBatchedGemm& operator=(const LtBatchedGemm&) = delete;

  void run(const BatchedGemmShape& shape, const void* a, const void* b, void* c);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan_for(const BatchedGemmShape& shape);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  std::map<BatchedGemmShape, Plan> plans_;
};

}  // namespace sluice::cuda
