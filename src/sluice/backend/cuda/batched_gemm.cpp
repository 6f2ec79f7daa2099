#include "sluice/backend/cuda/batched_gemm.h"

#include "sluice/backend/cuda/cuda_check.h"

namespace sluice::cuda {
namespace {

// A bf16 column-major [rows, cols] layout with leading dimension ld, repeated
// `batch` times `stride` elements apart.
cublasLtMatrixLayout_t batched_layout(std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int32_t batch,
                                      std::int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  SLUICE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, static_cast<std::uint64_t>(rows),
                                                 static_cast<std::uint64_t>(cols), ld));
  SLUICE_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
  SLUICE_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                       sizeof(stride)));
  return layout;
}

}  // namespace

LtBatchedGemm::LtBatchedGemm(cudaStream_t stream) : stream_(stream) { SLUICE_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

LtBatchedGemm::~LtBatchedGemm() {
  for (auto& [shape, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  cublasLtDestroy(handle_);
}

const LtBatchedGemm::Plan& LtBatchedGemm::plan_for(const BatchedGemmShape& s) {
  if (auto it = plans_.find(s); it != plans_.end()) return it->second;
  Plan plan;
  SLUICE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = s.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  SLUICE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  SLUICE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  plan.a = s.transpose_a ? batched_layout(s.k, s.m, s.lda, s.batch, s.stride_a)
                         : batched_layout(s.m, s.k, s.lda, s.batch, s.stride_a);
  plan.b = batched_layout(s.k, s.n, s.ldb, s.batch, s.stride_b);
  plan.c = batched_layout(s.m, s.n, s.ldc, s.batch, s.stride_c);
  cublasLtMatmulPreference_t pref = nullptr;
  SLUICE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t no_workspace = 0;
  SLUICE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &no_workspace, sizeof(no_workspace)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  SLUICE_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  SLUICE_CHECK_MSG(found > 0, "cuBLASLt found no algorithm for this batched GEMM");
  plan.algo = result.algo;
  return plans_.emplace(s, plan).first->second;
}

void LtBatchedGemm::run(const BatchedGemmShape& shape, const void* a, const void* b, void* c) {
  if (shape.n == 0 || shape.batch == 0) return;
  const Plan& plan = plan_for(shape);
  const float alpha = 1.0f, beta = 0.0f;
  SLUICE_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, c, plan.c, c, plan.c,
                                     &plan.algo, nullptr, 0, stream_));
}

}  // namespace sluice::cuda
