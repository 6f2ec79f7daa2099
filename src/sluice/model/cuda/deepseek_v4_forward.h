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
// Weights: linears stored FP8 (128x128 block scales) stay FP8 on the device
// when the reference was loaded with keep_quantized (the runner does), and
// run through the FP8 GEMMs: dense ones through Fp8Matmul (fp8_matmul.h:
// the split-K FP8 GEMV up to 16 rows, the grouped kernel under
// Fp8DenseGemm::kernel, else cuBLASLt's block-scaled GEMM on activations
// quantized per 1x128), the
// routed experts through the grouped GEMMs (moe_kernels.h: mma.sync on the
// weight dequantized in registers under MoeExpertGemm::grouped, wgmma e4m3
// on quantized activations under fp8_wgmma). FP4 experts are uploaded as
// stored and turned into FP8 on the device (launch_v4_fp4_to_fp8, exact
// where a 128x128 block's group exponents span at most 14; a weight with a
// block that is not is dequantized to bf16 on the device instead). A
// quantized weight no FP8 kernel takes (widths, stacked parts off the
// 128-row blocks) is dequantized to bf16 on the device. Everything else is
// bf16 (a bf16 / f32 checkpoint, and what DeepSeek keeps in bf16: the
// compressors, the router, the indexer's weights_proj, the head).
// Precision: the bf16 linears are cuBLASLt (or grouped) bf16 GEMMs with f32
// accumulation, inputs rounded to bf16, outputs f32; FP8 GEMMs with bf16
// activations are the same numbers (e4m3 x 2^k is a bf16), those with e4m3
// activations round them per 1x128 block. Norms, ropes, mHC, routing, compression and the residual
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

#include "sluice/backend/cuda/cuda_options.h"
#include "sluice/backend/cuda/fp8_gemm_counts.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/backend/ops.h"
#include "sluice/common/result.h"
#include "sluice/model/deepseek_v4.h"
#include "sluice/model/deepseek_v4_kv_layout.h"

namespace sluice::cuda {

// How CSA's indexer makes its key records and scores them: the pool gathered
// as f32, quantized to e4m3 by a second kernel and scored on CUDA cores
// (session 17, kept as the A/B), or the records made in one pass from the
// blocks and scored on tensor cores: mma.sync on the codes as f16 (session
// 18), or that at decode and warpgroup MMA on e4m3 where a step's rows share
// their keys (>= 4 rows a sequence: prefill; session 21, the default). All
// pick from the same records; the mma.sync scores differ from the CUDA-core
// ones only in the order of their sums, the wgmma ones by FP8 accumulation.
// e4m3_pool_wgmma_tf32_prefill: the warpgroup-MMA scores summed over heads by
// a tf32 MMA (session 26), ~2^-9 of a score's terms coarser: faster on a
// chunk of 8,192 rows, slower on one of 1,024 (S26-5). So
// e4m3_pool_wgmma_tf32_long_chunks takes it for steps of at least
// DeepseekV4DeviceOptions::tf32_head_sum_min_rows rows, the FMA head sum below.
enum class DeepseekV4IndexerKernels {
  f32_pool_cuda_cores,
  e4m3_pool_mma,
  e4m3_pool_wgmma_prefill,
  e4m3_pool_wgmma_tf32_prefill,
  e4m3_pool_wgmma_tf32_long_chunks
};

// The sparse attention's kernel: CUDA cores (session 11, kept as the A/B and
// the reference), mma.sync (session 18), warpgroup MMA with the softmax
// weights as two bf16 terms (session 22; these three match the f32
// reference to the same bound) or as one (session 22, the default:
// FlashMLA's precision, each weight to 2^-9 of itself, about what rounding
// the output to bf16 for wo_a costs anyway).
enum class DeepseekV4AttentionKernel { cuda_cores, mma_sync, wgmma_two_terms, wgmma };

// The FP8 GEMMs' choices (CudaOptions' fields of the same names), the indexer's and the attention's kernels.
struct DeepseekV4DeviceOptions {
  Fp8DenseGemm fp8_dense_gemm = Fp8DenseGemm::cublaslt;
  MoeExpertGemm moe_expert_gemm = MoeExpertGemm::fp8_wgmma;
  // The tf32 head sum from 2,048 rows (session 29, H100): the CSA layer's
  // last 8k chunk at 128k 14.47 ms against the FMA sum's 14.62, the indexer
  // 24.3% of the layer against 25.1%; on the H200 (S26-5) 25.6% against 26.7%.
  // Its 2^-9 is far below the e4m3 scores' own 2^-4.
  DeepseekV4IndexerKernels indexer = DeepseekV4IndexerKernels::e4m3_pool_wgmma_tf32_long_chunks;
  // e4m3_pool_wgmma_tf32_long_chunks' cut: the scores of 1,024 rows take
  // 0.704 ms with the tf32 sum, 0.668 with the FMA sum; of 2,048 rows 1.261
  // against 1.315 (session 29, H100, cuda_bench --deepseek-v4-kernels).
  std::int32_t tf32_head_sum_min_rows = 2048;
  DeepseekV4AttentionKernel attention = DeepseekV4AttentionKernel::wgmma;
};

// The weights random() makes: bf16 uniform (session 12's bench), or as
// DeepSeek ships V4-Flash (FP8 dense linears; routed experts FP8, or FP4
// turned into FP8 at load). `as_bf16` makes the same values as the
// quantized kinds, dequantized to bf16 on the device: the bf16 path on
// exactly the weights of the FP8 one.
enum class DeepseekV4RandomWeights { bf16, fp8, fp8_fp4_experts };

class DeepseekV4DeviceForward {
 public:
  // Uploads `reference`'s weights (see the top of this file for which stay
  // FP8); `layout` (its block size) must outlive this.
  static Result<std::unique_ptr<DeepseekV4DeviceForward>> upload(const DeepseekV4Reference& reference,
                                                                 const DeepseekV4KvLayout& layout,
                                                                 const DeepseekV4DeviceOptions& options = {});
  // Random weights made on the device, for benchmarks at widths whose
  // checkpoint would not fit the host (V4-Flash's 256 experts): `config`
  // is a deepseek_v4 config; values are uniform, scaled per input width.
  static Result<std::unique_ptr<DeepseekV4DeviceForward>> random(
      const ModelConfig& config, const DeepseekV4KvLayout& layout, std::uint64_t seed,
      DeepseekV4RandomWeights kind = DeepseekV4RandomWeights::bf16, bool as_bf16 = false,
      const DeepseekV4DeviceOptions& options = {});
  // Drops the host copy of `reference`'s weights once they are on the
  // device: afterwards `reference` answers config() and nothing else.
  static void release_host_weights(DeepseekV4Reference& reference);
  ~DeepseekV4DeviceForward();

  // One engine step (rows in sequence order, as StepLayout numbers them) over
  // `blocks` (layout().floats_per_block() floats a block, or more): writes
  // each row's state into its sequence's blocks and returns the logits
  // [step.sample_rows.size(), vocab] (synchronises `stream` once, at the end).
  Result<std::vector<float>> forward(const StepLayout& step, const V4PagedBlocks& blocks, cudaStream_t stream) const;
  // The same step, its logits left on the device: copied into `device_logits`
  // ([step.sample_rows.size(), vocab] f32) for a sampler there. At batch 64
  // the copy to a host vector took 4.7 ms of a 10.1 ms decode step (S18 v4idx).
  Status forward_into(const StepLayout& step, const V4PagedBlocks& blocks, float* device_logits,
                      cudaStream_t stream) const;
  // forward_into() without its synchronisation: returns once the step is
  // enqueued on `stream` (the host's share of a step, timed apart by the bench).
  Status enqueue_into(const StepLayout& step, const V4PagedBlocks& blocks, float* device_logits,
                      cudaStream_t stream) const;

  // Device bytes of the weights.
  std::int64_t weight_bytes() const;
  // What the upload kept: linears by format, and FP4 weights with a block
  // that e4m3 could not hold exactly (dequantized to bf16 instead).
  struct WeightSummary {
    std::int32_t bf16_linears = 0, fp8_linears = 0, dequantized_on_device = 0;
    std::int32_t fp4_converted = 0, fp4_inexact = 0;
    std::int64_t bf16_bytes = 0, fp8_bytes = 0;  // values and scales
  };
  WeightSummary weight_summary() const;
  // The FP8 dense GEMMs that asked cuBLASLt so far (ran there, or refused and
  // took the grouped kernel): says which path ran.
  Fp8GemmCounts fp8_gemm_counts() const;

  struct Weights;  // device copies (deepseek_v4_forward.cpp)
  struct Runtime;  // the scratch arena, staging and GEMM handles of forward()

 private:
  DeepseekV4DeviceForward();
  // Enqueues the step on `stream`; the sampled rows' logits (null when none
  // is sampled) stay in the step's scratch until the next step.
  Result<const float*> run_step(const StepLayout& step, const V4PagedBlocks& blocks, cudaStream_t stream) const;
  std::unique_ptr<Weights> w_;
  std::unique_ptr<Runtime> rt_;
};

}  // namespace sluice::cuda
