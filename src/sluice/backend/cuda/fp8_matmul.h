// Ops::matmul with an FP8 block-scaled weight (Tensor::scales, 128x128) on
// CUDA: a pure choice of path (fp8_matmul_path), then either the grouped
// kernel in its one-group form (decode sizes, and the fallback) or the
// activations quantized per 1x128 block and cuBLASLt's block-scaled GEMM.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "sluice/backend/cuda/cuda_options.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/lt_gemm_fp8.h"
#include "sluice/backend/cuda/scratch_arena.h"
#include "sluice/backend/tensor.h"

namespace sluice::cuda {

// Rows up to which the grouped kernel runs whatever the options say: the
// GEMM streams the weight once and quantizing the activations would only add a kernel.
inline constexpr std::int64_t kFp8KernelMaxRows = 16;

enum class Fp8MatmulPath { grouped_kernel, cublaslt };
Fp8MatmulPath fp8_matmul_path(Fp8DenseGemm asked, std::int64_t m, std::int64_t n, std::int64_t k);

class Fp8Matmul {
 public:
  Fp8Matmul(cudaStream_t stream, std::int64_t workspace_bytes, Fp8DenseGemm asked)
      : stream_(stream), workspace_bytes_(workspace_bytes), asked_(asked) {}

  // out[m, n] = x[m, k] . w[n, k]^T with x bf16, out bf16 or f32. Takes its
  // scratch first (replayed graphs need the same addresses), then enqueues
  // only if launch_kernels.
  void run(const Tensor& x, const Tensor& w, const Tensor& out, ScratchArena& scratch, bool launch_kernels,
           const Launch& launch);

 private:
  void run_grouped_kernel(const Tensor& x, const Tensor& w, const Tensor& out, const Launch& launch) const;

  cudaStream_t stream_;
  std::int64_t workspace_bytes_;
  Fp8DenseGemm asked_;
  std::unique_ptr<LtGemmFp8> lt_;  // made at the first cuBLASLt GEMM (it checks cuBLASLt's version)
};

}  // namespace sluice::cuda
