// The DeepSeek-V4 device forward's f32 glue kernels (deepseek_v4_forward_kernels.h).
// A warp per output dot product (lanes stride the inner dimension, so weight
// rows are read coalesced); elementwise kernels a thread per value.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_forward_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

unsigned blocks_for(std::int64_t n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

__device__ __forceinline__ float dot_warp(const float* a, const float* b, int k) {
  float s = 0.0f;
  for (int i = threadIdx.x & 31; i < k; i += 32) s = fmaf(a[i], b[i], s);
  return warp_sum(s);
}

__global__ void linear_kernel(V4LinearArgs a) {
  const std::int64_t out = static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const std::int64_t per_batch = static_cast<std::int64_t>(a.m) * a.n;
  if (out >= per_batch * a.batches) return;
  const std::int64_t b = out / per_batch, mn = out % per_batch, m = mn / a.n, n = mn % a.n;
  const float v = dot_warp(a.x + b * a.x_batch + m * a.ldx, a.w + b * a.w_batch + n * a.k, a.k);
  if ((threadIdx.x & 31) == 0) a.y[b * a.y_batch + m * a.ldy + n] = v;
}

__global__ void rms_norm_kernel(float* x, std::int32_t dim, const float* weight, float eps) {
  __shared__ float scratch[32];
  float* p = x + static_cast<std::int64_t>(blockIdx.x) * dim;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) sum_sq = fmaf(p[i], p[i], sum_sq);
  const float inv = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) p[i] = p[i] * inv * (weight != nullptr ? weight[i] : 1.0f);
}

__global__ void rope_tail_kernel(float* x, std::int32_t rows, std::int32_t pieces, std::int32_t dim,
                                 const std::int32_t* positions, V4Rope rope, bool inverse) {
  const int half = rope.rope_dim / 2;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::int64_t>(rows) * pieces * half) return;
  const std::int64_t piece = i / half, pair = i % half, row = piece / pieces;
  // The angle is one f32 product, cos and sin in double: the CPU reference's rope_tail.
  const float angle = rope.inv_freq[pair] * static_cast<float>(positions[row]);
  const float c = static_cast<float>(cos(static_cast<double>(angle))) * rope.cos_sin_scale;
  float s = static_cast<float>(sin(static_cast<double>(angle))) * rope.cos_sin_scale;
  if (inverse) s = -s;
  float* v = x + piece * dim + (dim - rope.rope_dim) + 2 * pair;
  const float even = v[0], odd = v[1];
  v[0] = even * c - odd * s;
  v[1] = odd * c + even * s;
}

__global__ void embed_streams_kernel(const float* embed, const std::int32_t* tokens, std::int32_t rows,
                                     std::int32_t hc, std::int32_t hidden, float* streams) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::int64_t>(rows) * hc * hidden) return;
  const std::int64_t r = i / (static_cast<std::int64_t>(hc) * hidden), d = i % hidden;
  streams[i] = embed[static_cast<std::int64_t>(tokens[r]) * hidden + d];
}

__global__ void copy_rows_kernel(const float* src, const std::int32_t* src_rows, float* dst,
                                 const std::int32_t* dst_rows, std::int32_t items, std::int32_t width) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::int64_t>(items) * width) return;
  const std::int64_t item = i / width, c = i % width;
  const std::int64_t s = src_rows != nullptr ? src_rows[item] : item, d = dst_rows != nullptr ? dst_rows[item] : item;
  dst[d * width + c] = src[s * width + c];
}

__global__ void scale_kernel(float* x, std::int64_t n, float factor) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

__global__ void to_bf16_kernel(const float* in, __nv_bfloat16* out, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(in[i]);
}

__global__ void quantize_e4m3_kernel(const float* in, std::int32_t width, std::uint8_t* out, float* scale) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const float* p = in + row * width;
  float amax = 0.0f;
  for (int i = threadIdx.x; i < width; i += blockDim.x) amax = fmaxf(amax, fabsf(p[i]));
  amax = warp_max(amax);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = amax;
  __syncthreads();
  float top = 0.0f;
  for (int w = 0; w < static_cast<int>((blockDim.x + 31) / 32); ++w) top = fmaxf(top, scratch[w]);
  const float s = top > 0.0f ? top / 448.0f : 1.0f;
  for (int i = threadIdx.x; i < width; i += blockDim.x)
    out[row * width + i] = __nv_fp8_e4m3(p[i] / s).__x;
  if (threadIdx.x == 0) scale[row] = s;
}

__device__ __forceinline__ std::int32_t slot_expert(const V4DenseExpertArgs& a, std::int64_t r, int s) {
  return s < a.k ? a.expert_ids[r * a.k + s] : a.num_experts;
}

__global__ void expert_up_kernel(V4DenseExpertArgs a) {
  const std::int64_t out = static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const std::int64_t width = 2LL * a.inter, slots = a.k + 1;
  if (out >= a.rows * slots * width) return;
  const std::int64_t r = out / (slots * width), s = out / width % slots, j = out % width;
  const std::int64_t e = slot_expert(a, r, static_cast<int>(s));
  const float v = dot_warp(a.gate_up + (e * width + j) * a.hidden, a.x + r * a.hidden, a.hidden);
  if ((threadIdx.x & 31) == 0) a.gate_up_out[out] = v;
}

__global__ void expert_down_kernel(V4DenseExpertArgs a) {
  const std::int64_t out = static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (out >= static_cast<std::int64_t>(a.rows) * a.hidden) return;
  const std::int64_t r = out / a.hidden, c = out % a.hidden;
  float sum = 0.0f;
  for (int s = 0; s <= a.k; ++s) {
    const std::int64_t e = slot_expert(a, r, s);
    const float w = s < a.k ? a.expert_weights[r * a.k + s] : 1.0f;
    sum += w * dot_warp(a.down + (e * a.hidden + c) * a.inter, a.act + (r * (a.k + 1) + s) * a.inter, a.inter);
  }
  if ((threadIdx.x & 31) == 0) a.out[out] = sum;
}

}  // namespace

void launch_v4_linear_f32(const V4LinearArgs& a, cudaStream_t stream) {
  SLUICE_CHECK(a.m >= 0 && a.n > 0 && a.k > 0 && a.batches > 0 && a.x && a.w && a.y);
  const std::int64_t outputs = static_cast<std::int64_t>(a.m) * a.n * a.batches;
  if (outputs == 0) return;
  linear_kernel<<<blocks_for(outputs, kWarps), kThreads, 0, stream>>>(a);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_rms_norm_f32(float* x, std::int64_t pieces, std::int32_t dim, const float* weight, float eps,
                            cudaStream_t stream) {
  SLUICE_CHECK(dim > 0 && pieces >= 0);
  if (pieces == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(pieces), kThreads, 0, stream>>>(x, dim, weight, eps);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_rope_tail_f32(float* x, std::int32_t rows, std::int32_t pieces_per_row, std::int32_t dim,
                             const std::int32_t* positions, V4Rope rope, bool inverse, cudaStream_t stream) {
  SLUICE_CHECK(rope.rope_dim > 0 && rope.rope_dim % 2 == 0 && rope.rope_dim <= dim && rope.inv_freq);
  const std::int64_t n = static_cast<std::int64_t>(rows) * pieces_per_row * (rope.rope_dim / 2);
  if (n == 0) return;
  rope_tail_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, rows, pieces_per_row, dim, positions, rope,
                                                                      inverse);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_embed_streams(const float* embed, const std::int32_t* tokens, std::int32_t rows, std::int32_t hc,
                             std::int32_t hidden, float* streams, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(rows) * hc * hidden;
  if (n == 0) return;
  embed_streams_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(embed, tokens, rows, hc, hidden, streams);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_copy_rows(const float* src, const std::int32_t* src_rows, float* dst, const std::int32_t* dst_rows,
                         std::int32_t items, std::int32_t width, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(items) * width;
  if (n == 0) return;
  copy_rows_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(src, src_rows, dst, dst_rows, items, width);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_scale_f32(float* x, std::int64_t n, float factor, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, n, factor);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_f32_to_bf16(const float* in, void* out_bf16, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  to_bf16_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out_bf16), n);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_quantize_e4m3_rows(const float* in, std::int64_t rows, std::int32_t width, std::uint8_t* out,
                                  float* scale, cudaStream_t stream) {
  SLUICE_CHECK(width > 0 && rows >= 0);
  if (rows == 0) return;
  quantize_e4m3_kernel<<<static_cast<unsigned>(rows), 128, 0, stream>>>(in, width, out, scale);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_dense_expert_up(const V4DenseExpertArgs& a, cudaStream_t stream) {
  SLUICE_CHECK(a.k > 0 && a.hidden > 0 && a.inter > 0 && a.num_experts > 0);
  const std::int64_t n = static_cast<std::int64_t>(a.rows) * (a.k + 1) * 2 * a.inter;
  if (n == 0) return;
  expert_up_kernel<<<blocks_for(n, kWarps), kThreads, 0, stream>>>(a);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_dense_expert_down(const V4DenseExpertArgs& a, cudaStream_t stream) {
  SLUICE_CHECK(a.k > 0 && a.hidden > 0 && a.inter > 0 && a.num_experts > 0);
  const std::int64_t n = static_cast<std::int64_t>(a.rows) * a.hidden;
  if (n == 0) return;
  expert_down_kernel<<<blocks_for(n, kWarps), kThreads, 0, stream>>>(a);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
