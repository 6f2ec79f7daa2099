// The lightning indexer (deepseek_v4_kernels.h): FP8 scores, then an exact
// top-k per query row.
//
// Scores: one block per (row, 128 keys), a thread per key. The row's query
// codes (e4m3, exact in f32) sit in shared memory; each thread streams its
// key's 128 codes 16 at a time against all heads' queries (broadcast reads)
// into 64 f32 dot products, then sums relu(dot) * q_scale * k_scale * w.
// Products of two e4m3 codes are exact in f32; only the 128-term sums and
// the head sum round (the reference sums in double).
//
// Top-k: one block per row, a radix select over the scores' order-preserving
// bit patterns (4 passes of 8 bits) finds the k-th largest value v; then one
// ordered sweep keeps every score > v and the first (k - count(> v)) scores
// == v in index order, which is the reference's rule (larger first, ties to
// the lower index), and writes them in ascending index order.
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
constexpr int kTopKThreads = 1024;

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

// A float's bits, reordered so that unsigned order is float order (-0 and +0 alike).
__device__ __forceinline__ std::uint32_t order_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const std::uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Exclusive prefix sum over the block of `v` (kTopKThreads threads); *total gets the sum.
__device__ __forceinline__ int block_exclusive_scan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inclusive = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += n;
  }
  __syncthreads();
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kTopKThreads / 32 ? warp_sums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    warp_sums[lane] = w;  // inclusive sums of the warps
  }
  __syncthreads();
  const int warp_base = warp == 0 ? 0 : warp_sums[warp - 1];
  *total = warp_sums[kTopKThreads / 32 - 1];
  return warp_base + inclusive - v;
}

__global__ void __launch_bounds__(kTopKThreads) v4_indexer_top_k_kernel(V4IndexerArgs args) {
  __shared__ int histogram[256];
  __shared__ int warp_sums[32];
  __shared__ std::uint32_t s_prefix;
  __shared__ int s_remaining;
  const int row = blockIdx.x;
  const int n = args.num_visible[row];
  const int k = min(args.top_k, n);
  const float* scores = args.scores + static_cast<std::int64_t>(row) * args.max_visible;
  std::int32_t* selected = args.selected + static_cast<std::int64_t>(row) * args.top_k;
  for (int i = k + threadIdx.x; i < args.top_k; i += kTopKThreads) selected[i] = -1;
  if (threadIdx.x == 0) args.num_selected[row] = k;
  if (k == n) {  // every visible entry
    for (int i = threadIdx.x; i < n; i += kTopKThreads) selected[i] = i;
    return;
  }
  // Radix select: the bits of the k-th largest key, 8 at a time from the top.
  std::uint32_t prefix = 0, prefix_mask = 0;
  int remaining = k;  // how many of the entries matching prefix still to take, from the top
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kTopKThreads) histogram[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kTopKThreads) {
      const std::uint32_t key = order_key(scores[i]);
      if ((key & prefix_mask) == prefix) atomicAdd(&histogram[(key >> shift) & 0xffu], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int r = remaining, bin = 255;
      for (; bin > 0; --bin) {
        if (histogram[bin] >= r) break;
        r -= histogram[bin];
      }
      s_prefix = prefix | (static_cast<std::uint32_t>(bin) << shift);
      s_remaining = r;
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    prefix_mask |= 0xffu << shift;
    __syncthreads();
  }
  // prefix is the k-th largest key; `remaining` of the entries equal to it are taken, the lowest indices.
  const std::uint32_t threshold = prefix;
  const int ties_taken = remaining;
  int ties_before = 0, written = 0;
  for (int base = 0; base < n; base += kTopKThreads) {
    const int i = base + threadIdx.x;
    const std::uint32_t key = i < n ? order_key(scores[i]) : 0u;
    const bool tie = i < n && key == threshold;
    int total_ties = 0;
    const int tie_rank = ties_before + block_exclusive_scan(tie ? 1 : 0, warp_sums, &total_ties);
    const bool take = i < n && (key > threshold || (tie && tie_rank < ties_taken));
    int total_taken = 0;
    const int slot = written + block_exclusive_scan(take ? 1 : 0, warp_sums, &total_taken);
    if (take) selected[slot] = i;
    ties_before += total_ties;
    written += total_taken;
  }
}

}  // namespace

void launch_v4_indexer_scores(const V4IndexerArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.num_heads > 0 && args.num_heads <= kMaxHeads);
  SLUICE_CHECK(args.max_visible >= 0);
  SLUICE_CHECK(args.q != nullptr && args.q_scale != nullptr && args.weights != nullptr && args.keys != nullptr &&
               args.key_scale != nullptr && args.key_begin != nullptr && args.num_visible != nullptr &&
               args.scores != nullptr);
  SLUICE_CHECK(reinterpret_cast<std::uintptr_t>(args.keys) % 16 == 0);
  if (args.rows == 0 || args.max_visible == 0) return;
  const int chunks = (args.max_visible + kScoreThreads - 1) / kScoreThreads;
  SLUICE_CHECK(chunks <= 65535);
  const dim3 grid(static_cast<unsigned>(args.rows), static_cast<unsigned>(chunks));
  v4_indexer_scores_kernel<<<grid, kScoreThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_indexer_top_k(const V4IndexerArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.top_k > 0 && args.max_visible >= 0);
  SLUICE_CHECK(args.scores != nullptr && args.selected != nullptr && args.num_selected != nullptr &&
               args.num_visible != nullptr);
  if (args.rows == 0) return;
  v4_indexer_top_k_kernel<<<static_cast<unsigned>(args.rows), kTopKThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
