// The lightning indexer's FP8 scores (deepseek_v4_kernels.h) on CUDA cores
// and on mma.sync.
//
// Scores: one block per (row, 128 keys), a thread per key. The row's query
// codes (e4m3, exact in f32) sit in shared memory; each thread streams its
// key's 128 codes 16 at a time against all heads' queries (broadcast reads)
// into 64 f32 dot products, then sums relu(dot) * q_scale * k_scale * w.
// Products of two e4m3 codes are exact in f32; only the 128-term sums and
// the head sum round (the reference sums in double).
//
// Scores on tensor cores (launch_v4_indexer_scores_mma): one block per (row,
// 256 keys), a warp per 32 keys, the row's queries as the A operand
// (heads x 128, f16 in shared memory) and the keys as B (128 x 32), four
// m16n8k16 tiles of heads by four of keys, eight steps over the 128 dims.
// e4m3 -> f16 is exact, products of two codes are exact in f32, and the
// accumulation is f32, so the scores differ from the CUDA-core kernel's only
// in the order of the sums. A dot product's terms may be summed in any order,
// so each lane loads its keys' bytes in two coalesced 16 B pieces and the
// queries are read with the same permutation of the dims.
//
// Top-k: deepseek_v4_indexer_top_k.cu.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kDim = kV4IndexHeadDim;
constexpr int kMaxHeads = kV4MaxIndexHeads;
constexpr int kScoreThreads = 128;

// e4m3 (bias 7, no infinities, 0x7f / 0xff NaN) to f32, exactly.
__device__ __forceinline__ float e4m3_to_f32(std::uint32_t b) {
  const std::uint32_t sign = (b & 0x80u) << 24, exp = (b >> 3) & 0xfu, man = b & 0x7u;
  float v;
  if (exp == 0) {
    v = static_cast<float>(man) * 0.001953125f;  // man * 2^-9
  } else {
    v = __uint_as_float(((exp + 120u) << 23) | (man << 20));
  }
  return __uint_as_float(__float_as_uint(v) | sign);
}

__global__ void __launch_bounds__(kScoreThreads) v4_indexer_scores_kernel(V4IndexerArgs args) {
  __shared__ __align__(16) float q[kMaxHeads][kDim];
  __shared__ float head_factor[kMaxHeads];
  const int row = blockIdx.x;
  const int num_visible = args.num_visible[row];
  const int t0 = blockIdx.y * kScoreThreads;
  if (t0 >= num_visible) return;  // the whole block: nothing below syncs
  const int heads = args.num_heads;
  const std::uint8_t* qr = args.q + static_cast<std::int64_t>(row) * heads * kDim;
  for (int i = threadIdx.x; i < heads * kDim; i += kScoreThreads) q[i / kDim][i % kDim] = e4m3_to_f32(qr[i]);
  const float dim_scale = rsqrtf(static_cast<float>(kDim));
  for (int h = threadIdx.x; h < heads; h += kScoreThreads)
    head_factor[h] = args.q_scale[row * heads + h] * args.weights[row * heads + h] * dim_scale;
  __syncthreads();
  const int t = t0 + threadIdx.x;
  if (t >= num_visible) return;
  const std::int64_t key = static_cast<std::int64_t>(args.key_begin[row]) + t;
  const uint4* kp = reinterpret_cast<const uint4*>(args.keys + key * kDim);
  float dots[kMaxHeads];
#pragma unroll
  for (int h = 0; h < kMaxHeads; ++h) dots[h] = 0.0f;
#pragma unroll 1
  for (int c = 0; c < kDim / 16; ++c) {
    const uint4 raw = kp[c];
    float k[16];
    const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) k[i] = e4m3_to_f32((words[i / 4] >> (8 * (i % 4))) & 0xffu);
#pragma unroll
    for (int h = 0; h < kMaxHeads; ++h) {
      if (h < heads) {
        const float* qh = &q[h][c * 16];
        float d = dots[h];
#pragma unroll
        for (int i = 0; i < 16; i += 4) {
          const float4 qv = *reinterpret_cast<const float4*>(qh + i);
          d = fmaf(qv.x, k[i], d);
          d = fmaf(qv.y, k[i + 1], d);
          d = fmaf(qv.z, k[i + 2], d);
          d = fmaf(qv.w, k[i + 3], d);
        }
        dots[h] = d;
      }
    }
  }
  const float key_scale = args.key_scale[key];
  float score = 0.0f;
#pragma unroll
  for (int h = 0; h < kMaxHeads; ++h)
    if (h < heads) score = fmaf(fmaxf(dots[h], 0.0f) * key_scale, head_factor[h], score);
  args.scores[static_cast<std::int64_t>(row) * args.max_visible + t] = score;
}

constexpr int kMmaWarps = 8;
constexpr int kMmaKeysPerWarp = 32;  // four n-tiles of 8
constexpr int kMmaKeys = kMmaWarps * kMmaKeysPerWarp;
// A query row in shared memory: 128 halves and 4 of padding (264 B), so the
// 8-byte reads of a half-warp (4 heads x 4 dim pieces) hit 32 distinct banks.
constexpr int kMmaQRowHalves = kDim + 4;

// Two e4m3 codes (the low byte first) as two f16 in one register (low half first), exactly.
__device__ __forceinline__ std::uint32_t e4m3x2_to_f16x2(std::uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return static_cast<std::uint32_t>(h.x) | static_cast<std::uint32_t>(h.y) << 16;
}

// c += a . b for one m16n8k16 tile of f16 operands.
__device__ __forceinline__ void mma_16816_f16(float (&c)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                              std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The dims a lane (tig = lane % 4) holds: 32 of the 128, bytes [16 tig, +16)
// and [64 + 16 tig, +16), as 16 pairs P[0..15] in that order. Step s (0..7)
// feeds the MMA's k pairs tig and 4 + tig with P[2s] and P[2s + 1]; over the
// four tigs and eight steps every pair of dims appears once, for A and B alike.
__device__ __forceinline__ int mma_step_first_dim(int tig, int s) {
  return (s < 4 ? 0 : kDim / 2) + 16 * tig + 4 * (s & 3);
}

__global__ void __launch_bounds__(kMmaWarps * 32, 2) v4_indexer_scores_mma_kernel(V4IndexerArgs args) {
  __shared__ __align__(16) __half q[kMaxHeads][kMmaQRowHalves];
  __shared__ float head_factor[kMaxHeads];
  const int row = blockIdx.x;
  const int num_visible = args.num_visible[row];
  const int t0 = blockIdx.y * kMmaKeys;
  if (t0 >= num_visible) return;  // the whole block: nothing below syncs
  const int heads = args.num_heads;
  // The row's queries to f16, heads past num_heads zero (their factor too: they add exact zeros).
  const std::uint8_t* qr = args.q + static_cast<std::int64_t>(row) * heads * kDim;
  for (int i = threadIdx.x; i < kMaxHeads * kDim / 2; i += kMmaWarps * 32) {
    const int h = i / (kDim / 2), c = 2 * (i % (kDim / 2));
    std::uint32_t v = 0;
    if (h < heads) v = e4m3x2_to_f16x2(qr[h * kDim + c] | static_cast<std::uint32_t>(qr[h * kDim + c + 1]) << 8);
    *reinterpret_cast<std::uint32_t*>(&q[h][c]) = v;
  }
  const float dim_scale = rsqrtf(static_cast<float>(kDim));
  for (int h = threadIdx.x; h < kMaxHeads; h += kMmaWarps * 32)
    head_factor[h] = h < heads ? args.q_scale[row * heads + h] * args.weights[row * heads + h] * dim_scale : 0.0f;
  __syncthreads();
  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int warp_t0 = t0 + (threadIdx.x >> 5) * kMmaKeysPerWarp;
  if (warp_t0 >= num_visible) return;
  const std::int64_t key_begin = args.key_begin[row];
  // B: key warp_t0 + 8 j + g of each n-tile j, this lane's 32 bytes, all loads in flight before the first use.
  uint4 raw[4][2];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int t = warp_t0 + 8 * j + g;
    if (t < num_visible) {
      const uint4* kp = reinterpret_cast<const uint4*>(args.keys + (key_begin + t) * kDim);
      raw[j][0] = __ldg(kp + tig);
      raw[j][1] = __ldg(kp + 4 + tig);
    } else {
      raw[j][0] = raw[j][1] = make_uint4(0, 0, 0, 0);
    }
  }
  std::uint32_t b[4][16];
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const std::uint32_t words[4] = {raw[j][half].x, raw[j][half].y, raw[j][half].z, raw[j][half].w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        b[j][8 * half + 2 * w] = e4m3x2_to_f16x2(words[w]);
        b[j][8 * half + 2 * w + 1] = e4m3x2_to_f16x2(words[w] >> 16);
      }
    }
  float part[4][2] = {};
#pragma unroll 1
  for (int mt = 0; mt < kMaxHeads / 16; ++mt) {
    if (mt * 16 >= heads) break;
    float acc[4][4] = {};
    const __half* q_lo = q[mt * 16 + g];
    const __half* q_hi = q[mt * 16 + g + 8];
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const int d = mma_step_first_dim(tig, s);
      const uint2 lo = *reinterpret_cast<const uint2*>(q_lo + d);
      const uint2 hi = *reinterpret_cast<const uint2*>(q_hi + d);
#pragma unroll
      for (int j = 0; j < 4; ++j) mma_16816_f16(acc[j], lo.x, hi.x, lo.y, hi.y, b[j][2 * s], b[j][2 * s + 1]);
    }
    const float f_lo = head_factor[mt * 16 + g], f_hi = head_factor[mt * 16 + g + 8];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        part[j][e] = fmaf(fmaxf(acc[j][e], 0.0f), f_lo, part[j][e]);
        part[j][e] = fmaf(fmaxf(acc[j][2 + e], 0.0f), f_hi, part[j][e]);
      }
  }
  // Sum over the 8 lane groups (heads g and g + 8 of every tile); lanes of group 0 write.
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float v = part[j][e];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      const int t = warp_t0 + 8 * j + 2 * tig + e;
      if (g == 0 && t < num_visible)
        args.scores[static_cast<std::int64_t>(row) * args.max_visible + t] = v * args.key_scale[key_begin + t];
    }
}

// What both score kernels need of their arguments.
void check_indexer_args(const V4IndexerArgs& args) {
  SLUICE_CHECK(args.num_heads > 0 && args.num_heads <= kMaxHeads);
  SLUICE_CHECK(args.max_visible >= 0);
  SLUICE_CHECK(args.q != nullptr && args.q_scale != nullptr && args.weights != nullptr && args.keys != nullptr &&
               args.key_scale != nullptr && args.key_begin != nullptr && args.num_visible != nullptr &&
               args.scores != nullptr);
  SLUICE_CHECK(reinterpret_cast<std::uintptr_t>(args.keys) % 16 == 0);
}

}  // namespace

void launch_v4_indexer_scores(const V4IndexerArgs& args, cudaStream_t stream) {
  check_indexer_args(args);
  if (args.rows == 0 || args.max_visible == 0) return;
  const int chunks = (args.max_visible + kScoreThreads - 1) / kScoreThreads;
  SLUICE_CHECK(chunks <= 65535);
  const dim3 grid(static_cast<unsigned>(args.rows), static_cast<unsigned>(chunks));
  v4_indexer_scores_kernel<<<grid, kScoreThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_indexer_scores_mma(const V4IndexerArgs& args, cudaStream_t stream) {
  check_indexer_args(args);
  if (args.rows == 0 || args.max_visible == 0) return;
  const int chunks = (args.max_visible + kMmaKeys - 1) / kMmaKeys;
  SLUICE_CHECK(chunks <= 65535);
  const dim3 grid(static_cast<unsigned>(args.rows), static_cast<unsigned>(chunks));
  v4_indexer_scores_mma_kernel<<<grid, kMmaWarps * 32, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
