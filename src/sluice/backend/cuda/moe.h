// Ops::moe_route and Ops::moe_experts on CUDA: checks, scratch, and the
// kernel sequence (kernels/moe_kernels.h):
//   route    one block a row: sigmoid, grouped top-k, weights
//   plan     pairs (row, choice) sorted by expert into slots, cut into tiles
//   gate_up  grouped GEMM with the SwiGLU epilogue -> act [pairs, I]
//   down     grouped GEMM -> y [pairs, H]
//   combine  out[r] += sum_j weight[r, j] * y[slot(r, j)]
// Expert weights are bf16, or FP8 with 128x128 block scales. Nothing reads a
// count back to the host, so decode steps stay capturable as CUDA graphs.
#pragma once

#include "sluice/backend/cuda/cuda_options.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/scratch_arena.h"
#include "sluice/backend/ops.h"
#include "sluice/common/result.h"

namespace sluice::cuda {

// Where the ops run: both take their scratch first (replayed graphs need the
// same addresses) and enqueue only if launch_kernels.
struct MoeContext {
  ScratchArena& scratch;
  const Launch& launch;
  bool launch_kernels = true;
  MoeExpertGemm expert_gemm = MoeExpertGemm::grouped;
};

[[nodiscard]] Status moe_route(const Tensor& router_logits, const Tensor& correction_bias, const MoeRouting& routing,
                               const MoeAssignment& out, const MoeContext& context);
// MoeExpertGemm::fp8_wgmma (here and in DeepSeek-V4's forward): x is
// quantized into slot order (each token's row written to its k slots), so
// gate_up loads its A tiles as consecutive rows (one TMA box a stage)
// instead of gathering 128 rows by cp.async. The default since session 35:
// gate_up 3.27 -> 2.42 ms, the V3 MoE layer at 4,096 tokens 5.44 -> 4.64 ms
// (S35-5, H100). false: x quantized once a token and gathered. Tests and the
// bench switch it; the bits are the same either way (by test).
void set_moe_fp8_x_by_slot(bool by_slot);
bool moe_fp8_x_by_slot();
[[nodiscard]] Status moe_experts(const Tensor& x, const MoeExpertWeights& experts, const MoeAssignment& assignment,
                                 const Tensor& out, const MoeContext& context);

}  // namespace sluice::cuda
