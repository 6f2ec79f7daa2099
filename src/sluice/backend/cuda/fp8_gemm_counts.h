// What happened to the FP8 block-scaled GEMMs that asked for cuBLASLt: how
// many ran there and how many went to the grouped kernel, and why the last
// refusal happened. Plain data (no CUDA headers), so tests and benchmarks can
// ask a CUDA Ops which path its FP8 matmuls took (cuda_fp8_gemm_counts).
#pragma once

#include <cstdint>
#include <string>

namespace sluice::cuda {

struct Fp8GemmCounts {
  std::int64_t num_cublaslt = 0;  // GEMMs cuBLASLt ran
  std::int64_t num_refused = 0;   // GEMMs it refused (the caller ran its fallback)
  std::string last_refusal;       // the rule, or cuBLASLt's status and log, with the shapes and layouts
};

}  // namespace sluice::cuda
