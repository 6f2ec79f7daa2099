// DeepSeek-V4 sparse attention with sinks over gathered shared-KV latents
// (deepseek_v4_kernels.h). One block per (query row, group of 8 heads): the
// heads of a row share their keys (K = V, MQA-like), so a block stages 32
// gathered latents at a time in shared memory and every key serves 8 heads.
// Per tile: 256 scores (warp = head, lane = key), an online-softmax update per
// head that starts from the sink (m = sink, l = 1, acc = 0: the sink sits in
// the denominator only), and the weighted sum of the tile's latents into 16
// f32 accumulators a thread. CUDA cores, f32 accumulation: simple and exact
// enough for the reference test; the tensor-core version is stage 4.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kDim = kV4LatentDim;
constexpr int kHeadsPerBlock = 8;
constexpr int kKeysPerTile = 32;
constexpr int kThreads = 256;
// 520 bf16 a staged latent (1040 B): 16 B aligned, and 16 B reads of 8
// consecutive rows fall on distinct banks.
constexpr int kKeyStride = kDim + 8;
constexpr int kDimsPerThread = kDim / 32;  // 16: dims 2 * lane + 64 * i, i < 8, of the warp's head

struct __align__(16) Smem {
  float q[kHeadsPerBlock][kDim];
  __nv_bfloat16 keys[kKeysPerTile][kKeyStride];
  float p[kHeadsPerBlock][kKeysPerTile];
};

__global__ void __launch_bounds__(kThreads) v4_sparse_attention_kernel(V4SparseAttentionArgs args) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int row = blockIdx.x, head0 = blockIdx.y * kHeadsPerBlock;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int head = head0 + warp;
  const bool head_live = head < args.num_heads;
  const auto* q = static_cast<const __nv_bfloat16*>(args.q);
  const auto* kv = static_cast<const __nv_bfloat16*>(args.kv);
  for (int i = threadIdx.x; i < kHeadsPerBlock * kDim; i += kThreads) {
    const int h = head0 + i / kDim;
    s.q[i / kDim][i % kDim] =
        h < args.num_heads ? __bfloat162float(q[(static_cast<std::int64_t>(row) * args.num_heads + h) * kDim + i % kDim])
                           : 0.0f;
  }
  const int num_keys = args.num_keys[row];
  const std::int32_t* key_rows = args.key_rows + static_cast<std::int64_t>(row) * args.max_keys;
  float m = head_live ? args.sinks[head] : 0.0f, l = 1.0f;
  float acc[kDimsPerThread];
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) acc[i] = 0.0f;

  for (int tile = 0; tile < num_keys; tile += kKeysPerTile) {
    const int tile_keys = min(kKeysPerTile, num_keys - tile);
    __syncthreads();  // the previous tile's keys and p are consumed (and q is staged)
    // Stage: 32 latents of 64 16-byte chunks.
    for (int c = threadIdx.x; c < kKeysPerTile * (kDim / 8); c += kThreads) {
      const int j = c / (kDim / 8), part = c % (kDim / 8);
      uint4 v = make_uint4(0, 0, 0, 0);
      if (j < tile_keys) v = reinterpret_cast<const uint4*>(kv + static_cast<std::int64_t>(key_rows[tile + j]) * kDim)[part];
      *reinterpret_cast<uint4*>(&s.keys[j][part * 8]) = v;
    }
    __syncthreads();
    // Scores: warp = head, lane = key.
    float score = -INFINITY;
    if (lane < tile_keys) {
      float dot = 0.0f;
      const float* qh = s.q[warp];
#pragma unroll 4
      for (int d = 0; d < kDim; d += 8) {
        const uint4 raw = *reinterpret_cast<const uint4*>(&s.keys[lane][d]);
        const auto* k2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
        const float4 qa = *reinterpret_cast<const float4*>(qh + d), qb = *reinterpret_cast<const float4*>(qh + d + 4);
        float2 k;
        k = __bfloat1622float2(k2[0]); dot = fmaf(qa.x, k.x, dot); dot = fmaf(qa.y, k.y, dot);
        k = __bfloat1622float2(k2[1]); dot = fmaf(qa.z, k.x, dot); dot = fmaf(qa.w, k.y, dot);
        k = __bfloat1622float2(k2[2]); dot = fmaf(qb.x, k.x, dot); dot = fmaf(qb.y, k.y, dot);
        k = __bfloat1622float2(k2[3]); dot = fmaf(qb.z, k.x, dot); dot = fmaf(qb.w, k.y, dot);
      }
      score = dot * args.softmax_scale;
    }
    const float m_new = fmaxf(m, warp_max(score));
    const float p = lane < tile_keys ? expf(score - m_new) : 0.0f;
    const float alpha = expf(m - m_new);
    l = l * alpha + warp_sum(p);
    m = m_new;
    s.p[warp][lane] = p;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) acc[i] *= alpha;
    for (int j = 0; j < tile_keys; ++j) {
      const float pj = s.p[warp][j];
#pragma unroll
      for (int i = 0; i < kDimsPerThread / 2; ++i) {
        const float2 k = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&s.keys[j][2 * lane + 64 * i]));
        acc[2 * i] = fmaf(pj, k.x, acc[2 * i]);
        acc[2 * i + 1] = fmaf(pj, k.y, acc[2 * i + 1]);
      }
    }
  }
  if (!head_live) return;
  const float inv_l = 1.0f / l;
  const std::int64_t out_base = (static_cast<std::int64_t>(row) * args.num_heads + head) * kDim;
  const int rope_begin = kDim - args.rope.rope_dim;
  const float position = args.rope.inv_freq != nullptr ? static_cast<float>(args.positions[row]) : 0.0f;
#pragma unroll
  for (int i = 0; i < kDimsPerThread / 2; ++i) {
    const int d = 2 * lane + 64 * i;
    float even = acc[2 * i] * inv_l, odd = acc[2 * i + 1] * inv_l;
    if (args.rope.inv_freq != nullptr && d >= rope_begin) {
      // The inverse rotation (the reference's rope_tail(..., inverse = true)).
      const float angle = args.rope.inv_freq[(d - rope_begin) / 2] * position;
      const float c = cosf(angle) * args.rope.cos_sin_scale, sn = -sinf(angle) * args.rope.cos_sin_scale;
      const float e = even * c - odd * sn, o = odd * c + even * sn;
      even = e;
      odd = o;
    }
    store_f(args.out, args.out_dt, out_base + d, even);
    store_f(args.out, args.out_dt, out_base + d + 1, odd);
  }
}

}  // namespace

void check_v4_sparse_attention_args(const V4SparseAttentionArgs& args) {
  SLUICE_CHECK(args.num_heads > 0 && args.max_keys >= 0);
  SLUICE_CHECK(args.q != nullptr && args.kv != nullptr && args.sinks != nullptr && args.out != nullptr);
  SLUICE_CHECK(args.num_keys != nullptr && (args.key_rows != nullptr || args.max_keys == 0));
  if (args.rope.inv_freq != nullptr)
    SLUICE_CHECK(args.positions != nullptr && args.rope.rope_dim > 0 && args.rope.rope_dim % 2 == 0 &&
                 args.rope.rope_dim <= kDim);
}

void launch_v4_sparse_attention(const V4SparseAttentionArgs& args, cudaStream_t stream) {
  check_v4_sparse_attention_args(args);
  if (args.rows == 0) return;
  constexpr auto smem = static_cast<int>(sizeof(Smem));
  static const bool configured = [] {
    SLUICE_CUDA_CHECK(
        cudaFuncSetAttribute(v4_sparse_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(args.rows), static_cast<unsigned>((args.num_heads + kHeadsPerBlock - 1) / kHeadsPerBlock));
  v4_sparse_attention_kernel<<<grid, kThreads, smem, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
