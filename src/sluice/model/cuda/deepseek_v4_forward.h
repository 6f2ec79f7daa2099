// DeepSeek-V4's forward pass on the device (issue 18 stage 3): the CPU
// reference's pass (model/deepseek_v4.h, DeepseekV4Reference::forward) over
// the engine's paged blocks in device memory (docs/kv-v4.md; the blocks of
// a KvCacheLayout::model_defined cache, byte for byte the CPU's), every
// sequence of a step at once, with the V4 kernels (kernels/deepseek_v4_kernels.h)
// and the f32 glue of kernels/deepseek_v4_forward_kernels.h:
//   per layer, hc_pre / RMSNorm / attention / hc_post, then the same around
//   the MoE; attention: q_a, q_norm, q_b, the per-head norm and V4's rope,
//   the latent (kv, kv_norm, rope) written to the window, the compressors
//   through a DeepseekV4CompressPlan per rate, CSA's indexer (queries and
//   keys quantized to e4m3 per row, the FP8 scores and the exact top-k),
//   the key gather, the sparse sink attention with the inverse rope, the
//   grouped wo_a and wo_b; MoE: the router, sqrtsoftplus or hash routing,
//   the routed experts and the shared one (clamped SwiGLU); hc_head, the
//   final norm and the LM head.
// Weights are the reference's f32 tensors uploaded as they are (FP8 / FP4
// checkpoints arrive dequantized: the FP4 GEMM and the FP8 linears are stage
// 4), activations f32, the attention's queries and keys bf16. The kernels are
// built for V4-Flash's head widths (latent 512, index head 128): upload()
// refuses others. The indexer scores e4m3 products where the reference
// scores f32 ones, so near the top-k boundary the picks may differ; with
// index_topk >= every visible entry they cannot.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/backend/ops.h"
#include "sluice/common/result.h"
#include "sluice/model/deepseek_v4.h"
#include "sluice/model/deepseek_v4_kv_layout.h"

namespace sluice::cuda {

class DeepseekV4DeviceForward {
 public:
  // Uploads `reference`'s weights; `layout` (its block size) must outlive this.
  static Result<std::unique_ptr<DeepseekV4DeviceForward>> upload(const DeepseekV4Reference& reference,
                                                                 const DeepseekV4KvLayout& layout);
  ~DeepseekV4DeviceForward();

  // One engine step (rows in sequence order, as StepLayout numbers them) over
  // `blocks` (layout().floats_per_block() floats a block, or more): writes
  // each row's state into its sequence's blocks and returns the logits
  // [step.sample_rows.size(), vocab] (synchronises `stream`).
  Result<std::vector<float>> forward(const StepLayout& step, const V4PagedBlocks& blocks, cudaStream_t stream) const;

  struct Weights;  // device copies (deepseek_v4_forward.cpp)

 private:
  DeepseekV4DeviceForward() = default;
  std::unique_ptr<Weights> w_;
};

}  // namespace sluice::cuda
