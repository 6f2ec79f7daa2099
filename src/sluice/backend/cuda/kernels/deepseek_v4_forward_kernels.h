// The small f32 kernels the DeepSeek-V4 device forward (deepseek_v4_forward.h)
// needs around the V4 kernels of deepseek_v4_kernels.h and the bf16 GEMMs
// (cuBLASLt, the grouped expert GEMM): RMSNorm over pieces, V4's rope (pairs
// (2i, 2i + 1) rotated in place), the embedding into the hc streams, row
// copies, bf16 conversion, the per-row e4m3 quantization the indexer's
// records take, the routed experts' weighted sum, and a random fill for
// benchmark weights. Elementwise: a thread per value, or a block a row.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {

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
// out[i] = a[i] * b[i] (out may be a or b).
void launch_v4_multiply_f32(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t stream);
void launch_v4_f32_to_bf16(const float* in, void* out_bf16, std::int64_t n, cudaStream_t stream);

// Each row of `width` floats to e4m3 with one f32 scale (amax / 448; 1 for a
// zero row): in ~= out * scale, the indexer's query heads and 132 B key records.
void launch_v4_quantize_e4m3_rows(const float* in, std::int64_t rows, std::int32_t width, std::uint8_t* out,
                                  float* scale, cudaStream_t stream);

// The routed experts' sum (after launch_grouped_gemm's down projection, by
// slot): out[r, :] += sum_j weights[r, j] * y[slot_of_pair[r * k + j], :]
// (j in order), f32 sums; out holds the shared expert's output before.
struct V4MoeCombineArgs {
  const void* y = nullptr;                     // y_dt [rows * k, hidden], by slot
  Dt y_dt{};                                   // f32, or bf16 (the FP8 grouped GEMM's output)
  const std::int32_t* slot_of_pair = nullptr;  // [rows * k] (launch_moe_plan)
  const float* weights = nullptr;              // [rows, k]
  float* out = nullptr;                        // [rows, hidden]
  std::int32_t rows = 0, k = 0, hidden = 0;
};
void launch_v4_moe_combine(const V4MoeCombineArgs& args, cudaStream_t stream);

// n values uniform in (offset - scale, offset + scale), bf16 or f32, from a
// hash of (seed, index): random weights made on the device for benchmarks.
void launch_v4_fill_uniform(void* out, Dt dt, std::int64_t n, float scale, std::uint64_t seed, cudaStream_t stream,
                            float offset = 0.0f);

}  // namespace sluice::cuda
