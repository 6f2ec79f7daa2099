#include "sluice/backend/cuda/lt_gemm.h"

#include <fmt/format.h>

#include "sluice/backend/cuda/cuda_check.h"

namespace sluice::cuda {
namespace {

template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  SLUICE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

}  // namespace

std::size_t lt_runtime_version() { return cublasLtGetVersion(); }

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

LtGemm::Plan& LtGemm::plan_for(Kind kind, std::int64_t m, std::int64_t n, std::int64_t k, DType out_dtype) {
  const Key key{kind, m, n, k, out_dtype};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan plan;
  SLUICE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const bool fp8 = kind == Kind::fp8_block_scaled;
  if (fp8) {
    // A is the weight (128x128 blocks), B the activations (1x128 blocks).
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                  static_cast<std::int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                  static_cast<std::int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<std::int8_t>(0));
  }
  const cudaDataType_t ab_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const cudaDataType_t c_type = out_dtype == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  // A = W stored column-major [k, n] (ld k), used transposed; B = X^T [k, m]; C = out^T [n, m].
  SLUICE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, ab_type, static_cast<std::uint64_t>(k),
                                                 static_cast<std::uint64_t>(n), k));
  SLUICE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, ab_type, static_cast<std::uint64_t>(k),
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
  // An unsupported FP8 combination is a status, not an invariant: the caller falls back.
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c,
                                                               plan.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0) plan.algo = result.algo;
  SLUICE_CHECK_MSG(fp8 || plan.algo, "cuBLASLt found no algorithm for this GEMM");
  return plans_.emplace(key, plan).first->second;
}

void LtGemm::run(const void* x, const void* w, void* out, DType out_dtype, std::int64_t m,
                 std::int64_t n, std::int64_t k) {
  if (m == 0) return;
  const Plan& plan = plan_for(Kind::bf16, m, n, k, out_dtype);
  const float alpha = 1.0f, beta = 0.0f;
  SLUICE_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, out,
                                     plan.c, out, plan.c, &*plan.algo, workspace_,
                                     static_cast<std::size_t>(workspace_bytes_), stream_));
}

bool LtGemm::run_fp8_block_scaled(const Fp8Operands& o) {
  static const std::size_t version = lt_runtime_version();
  SLUICE_CHECK_MSG(version >= kLtBlockScalingMinVersion,
                   fmt::format("FP8 block-scaled GEMMs need cuBLASLt {} or newer (1x128 and 128x128 block "
                               "scales); this process loaded cuBLASLt {}",
                               kLtBlockScalingMinVersion, version));
  SLUICE_CHECK(o.out_dtype == DType::bf16 || o.out_dtype == DType::f32);
  if (o.m == 0) return true;
  Plan& plan = plan_for(Kind::fp8_block_scaled, o.m, o.n, o.k, o.out_dtype);
  if (!plan.algo) return false;
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(o.w_scales));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(o.q_scales));
  const float alpha = 1.0f, beta = 0.0f;
  // cuBLASLt checks block-scaled operands (e.g. the scale tensors' alignment
  // for this M) only here; a refusal enqueues nothing and sends this shape to
  // the caller's fallback from now on.
  const cublasStatus_t status =
      cublasLtMatmul(handle_, plan.desc, &alpha, o.w, plan.a, o.q, plan.b, &beta, o.out, plan.c, o.out, plan.c,
                     &*plan.algo, workspace_, static_cast<std::size_t>(workspace_bytes_), stream_);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    plan.algo.reset();
    return false;
  }
  SLUICE_CUBLAS_CHECK(status);
  return true;
}

}  // namespace sluice::cuda
