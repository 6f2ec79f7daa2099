// FP8 block-scaled GEMMs through cuBLASLt (12.9+, sm_90), the DeepSeek-V3
// recipe: out[M, N] = (q, q_scales) . (w, w_scales)^T with q the activations
// in e4m3 with one f32 scale per 1x128 block (VEC128_32F) and w the weight
// [N, K] in e4m3 with one f32 scale per 128x128 block (BLK128x128_32F); TN
// layout as LtGemm, f32 compute, no fast accumulation (cuBLASLt refuses it
// with block scales, and it would drop low bits of every partial sum).
//
// Scale layouts cuBLASLt reads: the weight's [ceil(N/128), S] row-major with
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

class LtGemmFp8 {
 public:
  // Fails (SLUICE_CHECK, naming both versions) when cuBLASLt is older than
  // kLtBlockScalingMinVersion: callers ask lt_runtime_version() first.
  LtGemmFp8(cudaStream_t stream, std::int64_t workspace_bytes);
  ~LtGemmFp8();
  LtGemmFp8(const LtGemmFp8&) = delete;
  LtGemmFp8& operator=(const LtGemmFp8&) = delete;

  struct Operands {
    const void* q = nullptr;         // e4m3 [m, k]
    const float* q_scales = nullptr;  // [ceil(k / 128), m]
    const void* w = nullptr;         // e4m3 [n, k]
    const float* w_scales = nullptr;  // [ceil(n / 128), round_up(ceil(k / 128), 4)]
    void* out = nullptr;             // [m, n]
    DType out_dtype = DType::bf16;   // bf16 or f32
    std::int64_t m = 0, n = 0, k = 0;
  };
  // Enqueues the GEMM; false (nothing enqueued) when cuBLASLt has no
  // algorithm for the shape, for the caller's fallback.
  [[nodiscard]] bool run(const Operands& operands);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    std::optional<cublasLtMatmulAlgo_t> algo;  // none: cuBLASLt has no kernel for it
  };
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, DType>;
  Plan& plan_for(std::int64_t m, std::int64_t n, std::int64_t k, DType out_dtype);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::int64_t workspace_bytes_;
  std::map<Key, Plan> plans_;
};

}  // namespace sluice::cuda
