// The small f32 kernels the DeepSeek-V4 device forward (deepseek_v4_forward.h)
// needs around the V4 kernels of deepseek_v4_kernels.h: linears (strided and
// batched, so the grouped wo_a is one launch), RMSNorm over pieces, V4's
// rope (pairs (2i, 2i + 1) rotated in place), the embedding into the hc
// streams, row copies, bf16 conversion, the per-row e4m3 quantization the
// indexer's records take, and dense (non-FP4) expert projections over the
// routed slots plus the shared expert. Correctness first: CUDA cores, f32
// accumulation, a warp per output dot product (stage 4 replaces them with
// the tensor-core GEMMs).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {

// y[b, m, n] = sum_k x[b, m, k] * w[b, n, k], all f32, for b < batches, with
// row strides ldx / ldy and per-batch offsets x_batch / w_batch / y_batch.
struct V4LinearArgs {
  const float* x = nullptr;
  const float* w = nullptr;
  float* y = nullptr;
  std::int32_t m = 0, n = 0, k = 0, batches = 1;
  std::int64_t ldx = 0, ldy = 0;
  std::int64_t x_batch = 0, w_batch = 0, y_batch = 0;
};
void launch_v4_linear_f32(const V4LinearArgs& args, cudaStream_t stream);

// Each `dim`-wide piece of x: x * rsqrt(mean(x^2) + eps), times weight[dim] unless null.
void launch_v4_rms_norm_f32(float* x, std::int64_t pieces, std::int32_t dim, const float* weight, float eps,
                            cudaStream_t stream);

// Rotates the trailing rope.rope_dim of each `dim`-wide piece of row r
// (pieces_per_row pieces a row) by positions[r]; pairs (2i, 2i + 1) as
// complex numbers; `inverse` by the negative angle (DeepseekV4Kernels::rope_tail).
void launch_v4_rope_tail_f32(float* x, std::int32_t rows, std::int32_t pieces_per_row, std::int32_t dim,
                             const std::int32_t* positions, V4Rope rope, bool inverse, cudaStream_t stream);

// streams[r, j, :] = embed[tokens[r], :] for every stream j < hc.
void launch_v4_embed_streams(const float* embed, const std::int32_t* tokens, std::int32_t rows, std::int32_t hc,
                             std::int32_t hidden, float* streams, cudaStream_t stream);

// dst[dst_rows ? dst_rows[i] : i, :] = src[src_rows ? src_rows[i] : i, :] (width floats), i < items.
void launch_v4_copy_rows(const float* src, const std::int32_t* src_rows, float* dst, const std::int32_t* dst_rows,
                         std::int32_t items, std::int32_t width, cudaStream_t stream);

void launch_v4_scale_f32(float* x, std::int64_t n, float factor, cudaStream_t stream);
void launch_v4_f32_to_bf16(const float* in, void* out_bf16, std::int64_t n, cudaStream_t stream);

// Each row of `width` floats to e4m3 with one f32 scale (amax / 448; 1 for a
// zero row): in ~= out * scale, the indexer's query heads and 132 B key records.
void launch_v4_quantize_e4m3_rows(const float* in, std::int64_t rows, std::int32_t width, std::uint8_t* out,
                                  float* scale, cudaStream_t stream);

// Dense experts, f32 weights: gate_up [num_experts + 1, 2 * inter, hidden]
// (w1 rows then w3 rows; the last is the shared expert), down [num_experts +
// 1, hidden, inter]. Row r has k routed slots (expert_ids / expert_weights
// [rows, k]) and the shared expert as slot k with weight 1.
struct V4DenseExpertArgs {
  const float* x = nullptr;                    // [rows, hidden]
  const std::int32_t* expert_ids = nullptr;    // [rows, k]
  const float* expert_weights = nullptr;       // [rows, k]
  const float* gate_up = nullptr;
  const float* down = nullptr;
  float* gate_up_out = nullptr;  // [rows, k + 1, 2 * inter]
  const float* act = nullptr;    // [rows, k + 1, inter] (launch_v4_clamped_swiglu of gate_up_out)
  float* out = nullptr;          // [rows, hidden]
  std::int32_t rows = 0, k = 0, hidden = 0, inter = 0, num_experts = 0;
};
// gate_up_out[r, s] = gate_up[expert of slot s] . x[r].
void launch_v4_dense_expert_up(const V4DenseExpertArgs& args, cudaStream_t stream);
// out[r] = sum_s weight_s * down[expert of slot s] . act[r, s].
void launch_v4_dense_expert_down(const V4DenseExpertArgs& args, cudaStream_t stream);

}  // namespace sluice::cuda
