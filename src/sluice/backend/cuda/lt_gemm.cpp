#include "sluice/backend/cuda/lt_gemm.h"

#include "sluice/backend/cuda/cuda_check.h"

namespace sluice::cuda {

LtGemm::LtGemm(cudaStream_t stream, std::int64_t workspace_bytes)
    : stream_(stream), workspace_bytes_(workspace_bytes) {
  SLUICE_CUBLAS_CHECK(cublasLtCreate(&handle_));
  SLUICE_CUDA_CHECK(cudaMalloc(&workspace_, static_cast<std::size_t>(workspace_bytes_)));
}

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

const LtGemm::Plan& LtGemm::plan_for(std::int64_t m, std::int64_t n, std::int64_t k,
                                     DType out_dtype) {
  const Key key{m, n, k, out_dtype};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan plan;
  SLUICE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  SLUICE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                     &trans_a, sizeof(trans_a)));
  SLUICE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                     &trans_b, sizeof(trans_b)));
  const cudaDataType_t c_type = out_dtype == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  // A = W stored column-major [k, n] (ld k), used transposed; B = X^T [k, m]; C = out^T [n, m].
  SLUICE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, static_cast<std::uint64_t>(k),
                                                 static_cast<std::uint64_t>(n), k));
  SLUICE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, static_cast<std::uint64_t>(k),
                                                 static_cast<std::uint64_t>(m), k));
  SLUICE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, c_type, static_cast<std::uint64_t>(n),
                                                 static_cast<std::uint64_t>(m), n));
  cublasLtMatmulPreference_t pref = nullptr;
  SLUICE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t ws = static_cast<std::uint64_t>(workspace_bytes_);
  SLUICE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  SLUICE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c,
                                                     plan.c, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  SLUICE_CHECK_MSG(found > 0, "cuBLASLt found no algorithm for this GEMM");
  plan.algo = result.algo;
  return plans_.emplace(key, plan).first->second;
}

void LtGemm::run(const void* x, const void* w, void* out, DType out_dtype, std::int64_t m,
                 std::int64_t n, std::int64_t k) {
  if (m == 0) return;
  const Plan& plan = plan_for(m, n, k, out_dtype);
  const float alpha = 1.0f, beta = 0.0f;
  SLUICE_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, out,
                                     plan.c, out, plan.c, &plan.algo, workspace_,
                                     static_cast<std::size_t>(workspace_bytes_), stream_));
}

}  // namespace sluice::cuda
