// GEMMs through cuBLASLt with f32 accumulation, for weights in the Hugging
// Face [N, K] layout: out[M, N] = x[M, K] · w[N, K]^T.
//
// Row-major out^T is column-major out, so this is cuBLAS's "TN" product
// C[N, M] = W^T(T) · X^T. A plan (descriptors + the heuristic's first algorithm)
// is cached per (kind, M, N, K, out dtype): prefill sizes vary, decode sizes repeat.
//
// Two kinds: bf16 x bf16, and FP8 block-scaled (cuBLASLt 12.9+ on sm_90, the
// DeepSeek-V3 recipe): x in e4m3 with one f32 scale per 1x128 block
// (VEC128_32F) against w in e4m3 with one f32 scale per 128x128 block
// (BLK128x128_32F), f32 compute, no fast accumulation (cuBLASLt refuses it
// with block scales, and it would drop low bits of every partial sum).
//
// cuBLAS's rules for these modes ("128-element 1D and 128x128 2D block scaling
// for FP8 data types"; cuBLAS's A is our weight, its B our activations, so its
// M is our n and its N our m):
// - A and B e4m3, "TN" (A transposed, B not), compute 32F, scale type 32F;
//   D (= C) bf16, f16 or f32. A: BLK128x128 with B: VEC128 is one of the three
//   supported pairs (BLK x BLK is not).
// - M and N multiples of 4 (so m % 4 == 0: Fp8Matmul pads the rows);
//   every matrix 16-byte aligned with 16-byte leading dimensions.
// - Scale tensors start 16-byte aligned. VEC128 for B: [ceil(K/128), N] with N
//   fastest ("N-major"; launch_quantize_fp8_rows writes it). BLK128x128 for A:
//   K-major, [ceil(M/128), L4] with L4 = ceil(K/128) rounded up to 4 (the
//   checkpoint's weight_scale_inv, padded by the upload: BlockScales::row_stride).
// - The scale pointers are set before the heuristic query, as cuBLAS's own
//   sample does (the heuristic sees the whole descriptor).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "sluice/backend/cuda/fp8_gemm_counts.h"
#include "sluice/backend/tensor.h"

namespace sluice::cuda {

// cuBLASLt's version at run time (e.g. 130100) and the first that has block scaling.
inline constexpr std::size_t kLtBlockScalingMinVersion = 120900;
std::size_t lt_runtime_version();
// Floats per block row of 128x128 weight scales that cuBLASLt reads: a multiple of 4.
inline constexpr std::int64_t kLtWeightScaleRowAlignment = 4;
// cuBLAS's M and N (our n and m) of a block-scaled GEMM: multiples of 4.
inline constexpr std::int64_t kLtBlockScaledDimMultiple = 4;
// Operands, scales and leading dimensions of an FP8 GEMM: 16-byte aligned.
inline constexpr std::int64_t kLtAlignmentBytes = 16;

class LtGemm {
 public:
  LtGemm(cudaStream_t stream, std::int64_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // The SMs the stream's kernels may use (a green context's), for plans made
  // from now on; 0: the device's count (CudaOptions::gemm_sm_count_target).
  void set_sm_count_target(std::int32_t num_sms) { sm_count_target_ = num_sms; }

  // Benchmarks only (cuda_bench --fp8-dense): plans made from now on take the
  // heuristic's algorithm of this rank (0, the default: its first), or its
  // last where it returns fewer; heuristic_found() is how many the latest
  // plan's query returned (at most kHeuristicAlgos; at rank 0 the query asks
  // for one, as the engine's plans always have).
  static constexpr int kHeuristicAlgos = 8;
  void set_algo_rank(int rank) { algo_rank_ = rank; }
  int heuristic_found() const { return heuristic_found_; }

  // x: bf16 [m, k], w: bf16 [n, k], out: bf16 or f32 [m, n].
  void run(const void* x, const void* w, void* out, DType out_dtype, std::int64_t m,
           std::int64_t n, std::int64_t k);

  struct Fp8Operands {
    const void* q = nullptr;          // e4m3 [m, k]
    const float* q_scales = nullptr;  // [ceil(k / 128), m], m fastest
    const void* w = nullptr;          // e4m3 [n, k]
    const float* w_scales = nullptr;  // [ceil(n / 128), round_up(ceil(k / 128), 4)]
    void* out = nullptr;              // [m, n]
    DType out_dtype = DType::bf16;    // bf16 or f32
    std::int64_t m = 0, n = 0, k = 0;
    // The roles swapped (a benchmark's A/B, cuda_bench --fp8-dense): cuBLAS's
    // A is x (VEC128) and its B the weight (BLK128x128), the second of the
    // three supported pairs, so out holds out^T, [n, m]. cuBLASLt picks its
    // kernels by the problem as it sees it, and M and N trade places here.
    bool activations_as_a = false;
  };
  // Enqueues the FP8 block-scaled GEMM; false (nothing enqueued) when the
  // operands break cuBLAS's rules above or cuBLASLt has no algorithm for
  // them, for the caller's fallback. Every refusal is counted and its reason
  // (the rule, or cuBLASLt's status and log with the shapes and layouts) kept
  // in fp8_counts(); cuBLASLt's own refusals are also printed to stderr once
  // a shape (a broken rule is the caller's shape, e.g. an expert's row count). Fails
  // (SLUICE_CHECK, naming both versions) on a cuBLASLt older than
  // kLtBlockScalingMinVersion.
  [[nodiscard]] bool run_fp8_block_scaled(const Fp8Operands& operands);
  const Fp8GemmCounts& fp8_counts() const { return fp8_counts_; }

 private:
  enum class Kind { bf16, fp8_block_scaled };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    std::optional<cublasLtMatmulAlgo_t> algo;  // none: cuBLASLt has no kernel for it
    std::string refusal;                       // why not, when algo is none
  };
  using Key = std::tuple<Kind, std::int64_t, std::int64_t, std::int64_t, DType, bool, int>;  // ..., algo rank
  // fp8 (kind fp8_block_scaled only): the operands whose scale pointers the
  // heuristic query sees.
  Plan& plan_for(Kind kind, std::int64_t m, std::int64_t n, std::int64_t k, DType out_dtype,
                 const Fp8Operands* fp8 = nullptr);
  // The block scales' pointers on the plan's descriptor, by the operands' roles.
  static void set_scale_pointers(Plan& plan, const Fp8Operands& o);
  // Counts a refusal and keeps its reason; returns false.
  bool refuse(const std::string& reason);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::int64_t workspace_bytes_;
  std::int32_t sm_count_target_ = 0;
  int algo_rank_ = 0;
  int heuristic_found_ = 0;
  std::map<Key, Plan> plans_;
  Fp8GemmCounts fp8_counts_;
};

// Which of cuBLAS's block-scaling rules (dims, alignment) the operands break,
// in words; nullopt when they keep them all. Pure: the heuristic is not asked.
std::optional<std::string> lt_block_scaled_rule_broken(const LtGemm::Fp8Operands& operands);

}  // namespace sluice::cuda
