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
// with block scales, and it would drop low bits of every partial sum). The
// scale layouts cuBLASLt reads: the weight's [ceil(N/128), S] row-major with
// S = ceil(K/128) rounded up to a multiple of 4 (the checkpoint's
// weight_scale_inv, padded by the upload: BlockScales::row_stride), the
// activations' [ceil(K/128), M] with the row index fastest
// (launch_quantize_fp8_rows writes it).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "sluice/backend/tensor.h"

namespace sluice::cuda {

// cuBLASLt's version at run time (e.g. 130100) and the first that has block scaling.
inline constexpr std::size_t kLtBlockScalingMinVersion = 120900;
std::size_t lt_runtime_version();
// Floats per block row of 128x128 weight scales that cuBLASLt reads: a multiple of 4.
inline constexpr std::int64_t kLtWeightScaleRowAlignment = 4;

class LtGemm {
 public:
  LtGemm(cudaStream_t stream, std::int64_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // x: bf16 [m, k], w: bf16 [n, k], out: bf16 or f32 [m, n].
  void run(const void* x, const void* w, void* out, DType out_dtype, std::int64_t m,
           std::int64_t n, std::int64_t k);

  struct Fp8Operands {
    const void* q = nullptr;          // e4m3 [m, k]
    const float* q_scales = nullptr;  // [ceil(k / 128), m]
    const void* w = nullptr;          // e4m3 [n, k]
    const float* w_scales = nullptr;  // [ceil(n / 128), round_up(ceil(k / 128), 4)]
    void* out = nullptr;              // [m, n]
    DType out_dtype = DType::bf16;    // bf16 or f32
    std::int64_t m = 0, n = 0, k = 0;
  };
  // Enqueues the FP8 block-scaled GEMM; false (nothing enqueued) when
  // cuBLASLt has no algorithm for the shape or refuses its operands, for the caller's fallback. Fails
  // (SLUICE_CHECK, naming both versions) on a cuBLASLt older than
  // kLtBlockScalingMinVersion.
  [[nodiscard]] bool run_fp8_block_scaled(const Fp8Operands& operands);

 private:
  enum class Kind { bf16, fp8_block_scaled };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    std::optional<cublasLtMatmulAlgo_t> algo;  // none: cuBLASLt has no kernel for it
  };
  using Key = std::tuple<Kind, std::int64_t, std::int64_t, std::int64_t, DType>;
  Plan& plan_for(Kind kind, std::int64_t m, std::int64_t n, std::int64_t k, DType out_dtype);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::int64_t workspace_bytes_;
  std::map<Key, Plan> plans_;
};

}  // namespace sluice::cuda
