// Ops::matmul with an FP8 block-scaled weight (Tensor::scales, 128x128) on
// CUDA: a pure choice of path (fp8_matmul_path), then the split-K FP8 GEMV
// (decode sizes, kernels/fp8_gemv.h), the grouped kernel in its one-group
// form (Fp8DenseGemm::kernel, and the fallback) or the activations quantized
// per 1x128 block and cuBLASLt's block-scaled GEMM.
#pragma once

#include <cstdint>

#include "sluice/backend/cuda/cuda_options.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/lt_gemm.h"
#include "sluice/backend/cuda/scratch_arena.h"
#include "sluice/backend/tensor.h"

namespace sluice::cuda {

// Rows up to which a bf16-activation kernel runs whatever the options say
// (the FP8 GEMV, or the grouped kernel under Fp8DenseGemm::kernel or where
// the GEMV does not take K): the GEMM streams the weight once and quantizing
// the activations would only add a kernel.
inline constexpr std::int64_t kFp8KernelMaxRows = 16;

enum class Fp8MatmulPath { gemv, grouped_kernel, cublaslt };
Fp8MatmulPath fp8_matmul_path(Fp8DenseGemm asked, std::int64_t m, std::int64_t n, std::int64_t k);

class Fp8Matmul {
 public:
  Fp8Matmul(LtGemm& gemm, Fp8DenseGemm asked);

  // out[m, n] = x[m, k] . w[n, k]^T with x bf16, out bf16 or f32. Takes its
  // scratch first (replayed graphs need the same addresses), then enqueues
  // only if launch_kernels.
  void run(const Tensor& x, const Tensor& w, const Tensor& out, ScratchArena& scratch, bool launch_kernels,
           const Launch& launch);

 private:
  void run_grouped_kernel(const Tensor& x, const Tensor& w, const Tensor& out, const Launch& launch) const;

  LtGemm& gemm_;  // the Ops' cuBLASLt handle, workspace and plans
  Fp8DenseGemm asked_;
};

}  // namespace sluice::cuda
