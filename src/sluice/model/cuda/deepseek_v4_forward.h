// DeepSeek-V4's forward pass on the device (issue 18, stages 3 and 4): the
// CPU reference's pass (model/deepseek_v4.h, DeepseekV4Reference::forward)
// over the engine's paged blocks in device memory (docs/kv-v4.md; the blocks
// of a KvCacheLayout::model_defined cache, byte for byte the CPU's), every
// sequence of a step at once, with the V4 kernels (kernels/deepseek_v4_kernels.h)
// and the glue of kernels/deepseek_v4_forward_kernels.h:
//   per layer, hc_pre / RMSNorm / attention / hc_post, then the same around
//   the MoE; attention: q_a, q_norm, q_b, the per-head norm and V4's rope,
//   the latent (kv, kv_norm, rope) written to the window, the compressors
//   through a DeepseekV4CompressPlan per rate, CSA's indexer (queries and
//   keys quantized to e4m3 per row, the FP8 scores and the exact top-k),
//   the key gather, the sparse sink attention with the inverse rope, the
//   grouped wo_a (one strided-batched GEMM) and wo_b; MoE: the router,
//   sqrtsoftplus or hash routing, the routed experts through the grouped
//   GEMM (launch_moe_plan's slots), the shared expert (clamped SwiGLU);
//   hc_head, the final norm and the LM head.
//
// Precision: every linear is a cuBLASLt (or grouped) bf16 GEMM with f32
// accumulation: bf16 weights (FP8 / FP4 checkpoints arrive dequantized by the
// reference and are rounded to bf16, which holds e4m3 x 2^k and e2m1 x 2^k
// exactly; no FP8 or FP4 GEMM runs yet), the GEMM's input rounded to bf16,
// its output f32. Norms, ropes, mHC, routing, compression and the residual
// streams stay f32; the attention's queries and keys are bf16. The kernels
// are built for V4-Flash's head widths (latent 512, index head 128):
// upload() refuses others. The indexer scores e4m3 products where the
// reference scores f32 ones, so near the top-k boundary the picks may
// differ; with index_topk >= every visible entry they cannot.
//
// A step's temporaries come from a scratch arena owned here (grown to the
// high-water mark, reused by every layer), its int32 plans are built on the
// host once per step and copied in one piece; nothing synchronises the host
// until the logits are copied back. forward() is not reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
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
  // Uploads `reference`'s weights (linears as bf16); `layout` (its block size) must outlive this.
  static Result<std::unique_ptr<DeepseekV4DeviceForward>> upload(const DeepseekV4Reference& reference,
                                                                 const DeepseekV4KvLayout& layout);
  // Random weights made on the device, for benchmarks at widths whose
  // checkpoint would not fit the host (V4-Flash's 256 experts): `config`
  // is a deepseek_v4 config; values are uniform, scaled per input width.
  static Result<std::unique_ptr<DeepseekV4DeviceForward>> random(const ModelConfig& config,
                                                                 const DeepseekV4KvLayout& layout,
                                                                 std::uint64_t seed);
  // Drops the host copy of `reference`'s weights once they are on the
  // device: afterwards `reference` answers config() and nothing else.
  static void release_host_weights(DeepseekV4Reference& reference);
  ~DeepseekV4DeviceForward();

  // One engine step (rows in sequence order, as StepLayout numbers them) over
  // `blocks` (layout().floats_per_block() floats a block, or more): writes
  // each row's state into its sequence's blocks and returns the logits
  // [step.sample_rows.size(), vocab] (synchronises `stream` once, at the end).
  Result<std::vector<float>> forward(const StepLayout& step, const V4PagedBlocks& blocks, cudaStream_t stream) const;

  // Device bytes of the weights.
  std::int64_t weight_bytes() const;

  struct Weights;  // device copies (deepseek_v4_forward.cpp)
  struct Runtime;  // the scratch arena, staging and GEMM handles of forward()

 private:
  DeepseekV4DeviceForward();
  std::unique_ptr<Weights> w_;
  std::unique_ptr<Runtime> rt_;
};

}  // namespace sluice::cuda
