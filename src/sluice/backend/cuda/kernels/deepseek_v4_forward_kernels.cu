// The DeepSeek-V4 device forward's f32 glue kernels (deepseek_v4_forward_kernels.h).
// Elementwise kernels a thread per value; norms and quantization a block a row.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_forward_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

__global__ void rms_norm_kernel(float* x, std::int32_t dim, const float* weight, float eps) {
  __shared__ float scratch[32];
  float* p = x + static_cast<std::int64_t>(blockIdx.x) * dim;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) sum_sq = fmaf(p[i], p[i], sum_sq);
  const float inv = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) p[i] = p[i] * inv * (weight != nullptr ? weight[i] : 1.0f);
}

// The same norm with the piece in registers, read once, as float4s (the
// per-head and latent norms, 512 wide, ran a 256-thread block a piece with
// two block barriers): a warp a piece of kVec * 128 floats, or (kBlockPiece)
// a block a piece of kVec * 4 * kThreads floats (the hidden norms, 4096 wide).
template <int kVec, bool kBlockPiece>
__global__ void __launch_bounds__(kThreads) rms_norm_regs_kernel(float* x, std::int64_t pieces, std::int32_t dim,
                                                                 const float* weight, float eps) {
  constexpr int kLanes = kBlockPiece ? kThreads : 32;  // threads sharing a piece
  const std::int64_t piece =
      kBlockPiece ? blockIdx.x : static_cast<std::int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (piece >= pieces) return;  // whole warps (a warp a piece) or whole blocks
  const int lane = threadIdx.x % kLanes;
  float4* p = reinterpret_cast<float4*>(x + piece * dim);
  float4 v[kVec];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    v[i] = p[lane + kLanes * i];
    sum_sq = fmaf(v[i].x, v[i].x, fmaf(v[i].y, v[i].y, fmaf(v[i].z, v[i].z, fmaf(v[i].w, v[i].w, sum_sq))));
  }
  if constexpr (kBlockPiece) {
    __shared__ float scratch[32];
    sum_sq = block_sum(sum_sq, scratch);
  } else {
    sum_sq = warp_sum(sum_sq);
  }
  const float inv = rsqrtf(sum_sq / static_cast<float>(dim) + eps);
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const float4 w = weight != nullptr ? reinterpret_cast<const float4*>(weight)[lane + kLanes * i]
                                       : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    p[lane + kLanes * i] = make_float4(v[i].x * inv * w.x, v[i].y * inv * w.y, v[i].z * inv * w.z, v[i].w * inv * w.w);
  }
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

__global__ void multiply_kernel(const float* a, const float* b, float* out, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * b[i];
}

__global__ void to_bf16_kernel(const float* in, __nv_bfloat16* out, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(in[i]);
}
// Four values a thread (16-byte loads, 8-byte stores): the scalar form moved
// ~0.9 TB/s on a prefill chunk's activations (13 calls, 2.8 ms of a 128k chunk).
__global__ void to_bf16_x4_kernel(const float4* in, uint2* out, std::int64_t n4) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float4 v = in[i];
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  out[i] = make_uint2(*reinterpret_cast<const unsigned*>(&lo), *reinterpret_cast<const unsigned*>(&hi));
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
  const float s = e4m3_scale(top);
  for (int i = threadIdx.x; i < width; i += blockDim.x)
    out[row * width + i] = __nv_fp8_e4m3(p[i] / s).__x;
  if (threadIdx.x == 0) scale[row] = s;
}

__global__ void moe_combine_kernel(V4MoeCombineArgs a) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::int64_t>(a.rows) * a.hidden) return;
  const std::int64_t r = i / a.hidden, c = i % a.hidden;
  float sum = a.out[i];
  for (int j = 0; j < a.k; ++j) {
    const std::int64_t slot = a.slot_of_pair[r * a.k + j];
    sum = fmaf(a.weights[r * a.k + j], load_f(a.y, a.y_dt, slot * a.hidden + c), sum);
  }
  a.out[i] = sum;
}

// splitmix64 of (seed, index) to (-1, 1).
__device__ __forceinline__ float uniform_pm1(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

__global__ void fill_uniform_kernel(void* out, bool bf16, std::int64_t n, float scale, float offset,
                                    std::uint64_t seed) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = offset + scale * uniform_pm1(seed, static_cast<std::uint64_t>(i));
    if (bf16) static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16(v);
    else static_cast<float*>(out)[i] = v;
  }
}

}  // namespace

void launch_v4_rms_norm_f32(float* x, std::int64_t pieces, std::int32_t dim, const float* weight, float eps,
                            cudaStream_t stream) {
  SLUICE_CHECK(dim > 0 && pieces >= 0);
  if (pieces == 0) return;
  const bool aligned = reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(weight) % 16 == 0;  // null is aligned
  const unsigned warp_blocks = blocks_for(pieces, kThreads / 32), block_pieces = static_cast<unsigned>(pieces);
  if (aligned && dim == 4 * 32 * 4) {
    rms_norm_regs_kernel<4, false><<<warp_blocks, kThreads, 0, stream>>>(x, pieces, dim, weight, eps);
  } else if (aligned && dim == 8 * 32 * 4) {
    rms_norm_regs_kernel<8, false><<<warp_blocks, kThreads, 0, stream>>>(x, pieces, dim, weight, eps);
  } else if (aligned && dim == 4 * kThreads * 4) {
    rms_norm_regs_kernel<4, true><<<block_pieces, kThreads, 0, stream>>>(x, pieces, dim, weight, eps);
  } else {
    rms_norm_kernel<<<static_cast<unsigned>(pieces), kThreads, 0, stream>>>(x, dim, weight, eps);
  }
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

void launch_v4_multiply_f32(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  multiply_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a, b, out, n);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_f32_to_bf16(const float* in, void* out_bf16, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (n % 4 == 0 && reinterpret_cast<std::uintptr_t>(in) % 16 == 0 && reinterpret_cast<std::uintptr_t>(out_bf16) % 8 == 0)
    to_bf16_x4_kernel<<<blocks_for(n / 4, kThreads), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(in),
                                                                              static_cast<uint2*>(out_bf16), n / 4);
  else
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

void launch_v4_moe_combine(const V4MoeCombineArgs& a, cudaStream_t stream) {
  SLUICE_CHECK(a.k > 0 && a.hidden > 0 && a.rows >= 0);
  SLUICE_CHECK(a.y_dt == Dt::f32 || a.y_dt == Dt::bf16);
  const std::int64_t n = static_cast<std::int64_t>(a.rows) * a.hidden;
  if (n == 0) return;
  moe_combine_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_fill_uniform(void* out, Dt dt, std::int64_t n, float scale, std::uint64_t seed, cudaStream_t stream,
                            float offset) {
  SLUICE_CHECK(dt == Dt::bf16 || dt == Dt::f32);
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, 65536));
  fill_uniform_kernel<<<blocks, kThreads, 0, stream>>>(out, dt == Dt::bf16, n, scale, offset, seed);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
