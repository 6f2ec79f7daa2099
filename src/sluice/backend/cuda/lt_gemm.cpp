#include "sluice/backend/cuda/lt_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "sluice/backend/block_scales.h"
#include "sluice/backend/cuda/cuda_check.h"

namespace sluice::cuda {
namespace {

constexpr std::int32_t kScaleBlock = 128;
// cuBLASLt's log kept in a refusal: enough for the API trace of one query.
constexpr std::size_t kMaxLogChars = 6000;
// cuBLASLt's log levels: 5 traces every API call with its arguments (the
// descriptors' attributes included), lower levels add errors and hints.
constexpr int kLtLogApiTrace = 5;

template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  SLUICE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kLtAlignmentBytes == 0; }

std::int64_t round_up(std::int64_t v, std::int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

// The operands as cuBLAS sees them, for a refusal's message.
std::string describe(const LtGemm::Fp8Operands& o) {
  const std::int64_t l = num_scale_blocks(o.k, kScaleBlock);
  const char* out_type = o.out_dtype == DType::f32 ? "f32" : "bf16";
  return fmt::format(
      "out[{m}, {n}] {d} = x[{m}, {k}] . w[{n}, {k}]^T as cuBLAS TN: A = w e4m3 {k}x{n} ld {k} op T at {w}, "
      "BLK128x128_32F scales [{nb}][{l4}] K-major at {ws}; B = x e4m3 {k}x{m} ld {k} op N at {q}, VEC128_32F "
      "scales [{l}][{m}] N-major at {qs}; C = D {d} {n}x{m} ld {n} at {out}; compute 32F, scale type 32F, fast "
      "accumulation off; cuBLASLt {v}",
      fmt::arg("m", o.m), fmt::arg("n", o.n), fmt::arg("k", o.k), fmt::arg("d", out_type),
      fmt::arg("w", o.w), fmt::arg("ws", static_cast<const void*>(o.w_scales)),
      fmt::arg("nb", num_scale_blocks(o.n, kScaleBlock)), fmt::arg("l4", round_up(l, kLtWeightScaleRowAlignment)),
      fmt::arg("q", o.q), fmt::arg("qs", static_cast<const void*>(o.q_scales)), fmt::arg("l", l),
      fmt::arg("out", o.out), fmt::arg("v", lt_runtime_version())) +
         (o.activations_as_a ? " (asked with the roles swapped: A = x, B = w, D = out^T [n, m] in out)" : "");
}

// Where cuBLASLt's logger writes while lt_log_of runs its query.
std::string* lt_log_sink = nullptr;

void append_lt_log(int level, const char* function, const char* message) {
  if (lt_log_sink == nullptr || lt_log_sink->size() >= kMaxLogChars) return;
  *lt_log_sink += fmt::format("\n  [cuBLASLt {} {}] {}", level, function, message);
  if (lt_log_sink->size() > kMaxLogChars) lt_log_sink->resize(kMaxLogChars);
}

// cuBLASLt's own account of a failed call: the call run again with its
// logger on (the logger is process-wide, so only after a failure, and off
// again afterwards).
template <class Query>
std::string lt_log_of(const Query& query) {
  std::string log;
  lt_log_sink = &log;
  cublasLtLoggerSetCallback(&append_lt_log);
  cublasLtLoggerSetLevel(kLtLogApiTrace);
  query();
  cublasLtLoggerSetLevel(0);
  cublasLtLoggerSetCallback(nullptr);
  lt_log_sink = nullptr;
  return log.empty() ? std::string("\n  (cuBLASLt logged nothing)") : log;
}

}  // namespace

std::size_t lt_runtime_version() { return cublasLtGetVersion(); }

std::optional<std::string> lt_block_scaled_rule_broken(const LtGemm::Fp8Operands& o) {
  const std::int64_t out_bytes = o.out_dtype == DType::f32 ? 4 : 2;
  if (o.m % kLtBlockScaledDimMultiple != 0)
    return fmt::format("m = {} rows is not a multiple of {} (cuBLAS's N)", o.m, kLtBlockScaledDimMultiple);
  if (o.n % kLtBlockScaledDimMultiple != 0)
    return fmt::format("n = {} columns is not a multiple of {} (cuBLAS's M)", o.n, kLtBlockScaledDimMultiple);
  if (o.k % kLtAlignmentBytes != 0)
    return fmt::format("k = {}: e4m3 rows of {} bytes are not 16-byte multiples", o.k, o.k);
  if (o.n * out_bytes % kLtAlignmentBytes != 0)
    return fmt::format("n = {}: output rows of {} bytes are not 16-byte multiples", o.n, o.n * out_bytes);
  if (o.activations_as_a && o.m * out_bytes % kLtAlignmentBytes != 0)
    return fmt::format("m = {}: out^T's rows of {} bytes are not 16-byte multiples", o.m, o.m * out_bytes);
  const std::pair<const char*, const void*> pointers[] = {
      {"x (e4m3)", o.q}, {"x's scales", o.q_scales}, {"w", o.w}, {"w's scales", o.w_scales}, {"out", o.out}};
  for (const auto& [name, p] : pointers)
    if (!aligned(p)) return fmt::format("{} at {} is not 16-byte aligned", name, p);
  return std::nullopt;
}

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

LtGemm::Plan& LtGemm::plan_for(Kind kind, std::int64_t m, std::int64_t n, std::int64_t k, DType out_dtype,
                               const Fp8Operands* fp8_operands) {
  const bool swapped = fp8_operands != nullptr && fp8_operands->activations_as_a;
  const Key key{kind, m, n, k, out_dtype, swapped, algo_rank_};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan plan;
  SLUICE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (sm_count_target_ > 0) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, sm_count_target_);
  const bool fp8 = kind == Kind::fp8_block_scaled;
  SLUICE_CHECK(fp8 == (fp8_operands != nullptr));
  if (fp8) {
    // A is the weight (128x128 blocks), B the activations (1x128 blocks); swapped, the other way round.
    const auto weight_mode = static_cast<std::int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F);
    const auto activation_mode = static_cast<std::int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, swapped ? activation_mode : weight_mode);
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, swapped ? weight_mode : activation_mode);
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<std::int8_t>(0));
    set_scale_pointers(plan, *fp8_operands);
  }
  const cudaDataType_t ab_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const cudaDataType_t c_type = out_dtype == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  // A = W stored column-major [k, n] (ld k), used transposed; B = X^T [k, m]; C = out^T [n, m].
  // Swapped: A = X, B = W^T, C = out [m, n] column-major (out^T row-major).
  const std::uint64_t a_cols = static_cast<std::uint64_t>(swapped ? m : n);
  const std::uint64_t b_cols = static_cast<std::uint64_t>(swapped ? n : m);
  SLUICE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, ab_type, static_cast<std::uint64_t>(k), a_cols, k));
  SLUICE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, ab_type, static_cast<std::uint64_t>(k), b_cols, k));
  SLUICE_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan.c, c_type, a_cols, b_cols, static_cast<std::int64_t>(a_cols)));
  cublasLtMatmulPreference_t pref = nullptr;
  SLUICE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t ws = static_cast<std::uint64_t>(workspace_bytes_);
  SLUICE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t results[kHeuristicAlgos]{};
  int found = 0;
  // The default plan asks for one algorithm, as it always has; a benchmark's rank asks for more.
  const int wanted = algo_rank_ > 0 ? kHeuristicAlgos : 1;
  const auto query = [&] {
    return cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, wanted,
                                          results, &found);
  };
  // An unsupported FP8 combination is a status, not an invariant: the caller falls back.
  const cublasStatus_t status = query();
  heuristic_found_ = status == CUBLAS_STATUS_SUCCESS ? found : 0;
  if (status == CUBLAS_STATUS_SUCCESS && found > 0) {
    plan.algo = results[std::min(algo_rank_, found - 1)].algo;
  } else if (fp8) {
    plan.refusal = fmt::format("cublasLtMatmulAlgoGetHeuristic returned {} with {} algorithms (workspace {} bytes): {}",
                               cublasLtGetStatusName(status), found, workspace_bytes_, describe(*fp8_operands));
    plan.refusal += lt_log_of(query);
    std::fprintf(stderr, "sluice cuda: FP8 block-scaled GEMM falls back to the grouped kernel: %s\n",
                 plan.refusal.c_str());
  }
  cublasLtMatmulPreferenceDestroy(pref);
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

void LtGemm::set_scale_pointers(Plan& plan, const Fp8Operands& o) {
  const void* weight = o.w_scales;
  const void* activation = o.q_scales;
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, o.activations_as_a ? activation : weight);
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, o.activations_as_a ? weight : activation);
}

bool LtGemm::refuse(const std::string& reason) {
  ++fp8_counts_.num_refused;
  fp8_counts_.last_refusal = reason;
  return false;
}

bool LtGemm::run_fp8_block_scaled(const Fp8Operands& o) {
  static const std::size_t version = lt_runtime_version();
  SLUICE_CHECK_MSG(version >= kLtBlockScalingMinVersion,
                   fmt::format("FP8 block-scaled GEMMs need cuBLASLt {} or newer (1x128 and 128x128 block "
                               "scales); this process loaded cuBLASLt {}",
                               kLtBlockScalingMinVersion, version));
  SLUICE_CHECK(o.out_dtype == DType::bf16 || o.out_dtype == DType::f32);
  if (o.m == 0) return true;
  // Broken rules are the caller's shapes (e.g. an expert's row count), not
  // news: counted and kept, not printed.
  if (auto broken = lt_block_scaled_rule_broken(o)) return refuse(*broken + ": " + describe(o));
  Plan& plan = plan_for(Kind::fp8_block_scaled, o.m, o.n, o.k, o.out_dtype, &o);
  if (!plan.algo) return refuse(plan.refusal);
  set_scale_pointers(plan, o);
  const float alpha = 1.0f, beta = 0.0f;
  const void* a = o.activations_as_a ? o.q : o.w;
  const void* b = o.activations_as_a ? o.w : o.q;
  const auto matmul = [&] {
    return cublasLtMatmul(handle_, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, o.out, plan.c, o.out, plan.c,
                          &*plan.algo, workspace_, static_cast<std::size_t>(workspace_bytes_), stream_);
  };
  // cuBLASLt checks some block-scaled operands only here; a refusal enqueues
  // nothing and sends this shape to the caller's fallback from now on.
  const cublasStatus_t status = matmul();
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    plan.refusal = fmt::format("cublasLtMatmul returned {} for the heuristic's algorithm: {}",
                               cublasLtGetStatusName(status), describe(o));
    plan.refusal += lt_log_of(matmul);
    plan.algo.reset();
    std::fprintf(stderr, "sluice cuda: FP8 block-scaled GEMM falls back to the grouped kernel: %s\n",
                 plan.refusal.c_str());
    return refuse(plan.refusal);
  }
  SLUICE_CUBLAS_CHECK(status);
  ++fp8_counts_.num_cublaslt;
  return true;
}

}  // namespace sluice::cuda
