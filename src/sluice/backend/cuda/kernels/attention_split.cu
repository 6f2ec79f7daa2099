// Split-KV paged attention on CUDA cores: one block per (query row, kv head,
// group of up to kGroup query heads, key split). Used for decode rows, where
// the work is reading K and V once: every query head that shares a kv head is
// computed from the same K/V (GQA), and long contexts are split across blocks
// whose partial softmax states are merged by the last of a row's split
// blocks to finish (rows of at most 32 splits) or by a second kernel.
//
// K/V tiles of kTileKeys keys are gathered page by page with cp.async into a
// kStages-deep shared-memory ring, so the bytes in flight do not depend on
// registers (the register-staged version reached 47% of HBM at GQA group 4,
// 92% without GQA). Compute: a "lane group" of D/kDims lanes holds one key,
// kDims = 16 dims a lane (8 for groups of 4+ heads: at 16 the kernel needed
// 231 registers and ran at 12% occupancy, 49% of HBM), lane
// `sub` owning dims {v * D/kVec + sub * 8 + i}: each 16-byte shared load of a
// lane group then covers consecutive bytes, free of bank conflicts. Softmax
// runs in base 2 with the scale folded into q.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mbarrier.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/tma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kStages = 3;
// Most splits a row may have for the split kernels to merge them themselves
// (SplitParams::arrivals): batch 1 at 4k has 32, 8 x 8k 6.
constexpr int kFusedMergeMaxSplits = 32;
// K (or V) bytes per tile, kTileKeys * D * 2: 48 KB of ring per block lets
// four blocks share a multiprocessor.
constexpr int kTileBytes = 8192;
constexpr float kLog2e = 1.4426950408889634f;

struct SplitParams {
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  const __nv_bfloat16* k_cache;
  const __nv_bfloat16* v_cache;
  float* ws_acc;  // [num_split_rows, num_q_heads, max_splits, D]
  float* ws_ml;   // [num_split_rows, num_q_heads, max_splits, 2]
  int num_q_heads, num_kv_heads, block_size, head_chunks;
  // log2(block_size) when it is a power of two (16 in practice), else -1: a
  // key's page and slot by shift and mask instead of an integer division by
  // a runtime divisor (~20 instructions), once per key copied.
  int block_shift;
  // The split plan (split_of() below): splits in the grid and the workspace
  // (from the longest context the launch must cover: the graph bucket under
  // CUDA graphs), the shortest split a row is cut into, and the multiple of
  // keys (the kernel's tile) split lengths round up to.
  int max_splits, min_split_tokens, split_align;
  // DecodeSplitPlan::by_step_work: the step's keys (all split rows, summed on
  // the device) are cut into about target_blocks blocks of pairs_per_row
  // (kv head, head chunk) pairs each, so a row's split length follows the
  // whole step's work, not its own length. 0 = uniform_waves: split lengths
  // start from min_split_tokens.
  int target_blocks, pairs_per_row;
  int uniform_max_splits;  // the uniform plan's splits (<= max_splits)
  float scale_log2;
  // Fused merge (AttentionArgs::split_arrivals): a counter per (split row,
  // blockIdx.y), zero between launches; the last of a row's split blocks to
  // arrive merges the partials (merge_splits()), so no combine kernel runs.
  // Null: the combine kernel merges.
  int* arrivals;
  // DecodeSplitLoads::tma_steal with the fused merge: a counter per (split
  // row, blockIdx.y), zero between launches, from which the TMA kernel's
  // warps claim a row's 16-key slices (WarpSlices); the last block to arrive
  // resets it. Null: each block takes its own split's keys.
  int* steal_counters;
  // Benchmarks (set_decode_split_timeline): where the keys-as-rows kernel's
  // blocks stamp %globaltimer, and for how many blocks; null: off.
  std::uint64_t* timeline;
  long long timeline_blocks;
};

std::uint64_t* g_timeline = nullptr;  // set_decode_split_timeline()
long long g_timeline_blocks = 0;

// Thread 0 stamps moment `i` of this block (DecodeSplitMoment) where a timeline is set.
__device__ __forceinline__ void stamp(const SplitParams& p, DecodeSplitMoment i) {
  if (p.timeline == nullptr || threadIdx.x != 0) return;
  const long long block =
      blockIdx.x + static_cast<long long>(gridDim.x) * (blockIdx.y + static_cast<long long>(gridDim.y) * blockIdx.z);
  if (block >= p.timeline_blocks) return;
  std::uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  p.timeline[block * kDecodeSplitMoments + static_cast<int>(i)] = now;
}

// One row's splits, from the row's own key count, not the longest the grid
// was sized for: under a graph captured for the 16384 bucket, 8193 keys were
// one 8192-key split and one 1-key split; here they are two of 4160 and 4033.
// Blocks past num_splits exit at once. The split and combine kernels both
// call this, so the plan needs no metadata of its own.
struct RowSplit {
  int num_splits, split_tokens;
};
// The step's split rows: their keys in all, and the longest. Each warp
// computes them on its own with shuffles (no shared memory: the tensor-core
// kernel's occupancy is set by its K/V ring), so every thread gets them
// without a barrier. The step's metadata is immutable while it runs, so this
// may run before pdl_wait().
struct StepKeys {
  long long total;
  int longest;
};
__device__ __forceinline__ StepKeys step_split_keys(const StepDeviceView& step) {
  long long total = 0;
  int longest = 0;
  for (int i = threadIdx.x & 31; i < step.num_split_rows; i += 32) {
    const int keys = step.positions[step.split_rows[i]] + 1;
    total += keys;
    longest = max(longest, keys);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    total += __shfl_xor_sync(0xffffffffu, total, offset);
    longest = max(longest, __shfl_xor_sync(0xffffffffu, longest, offset));
  }
  return {total, longest};
}

// How this step cuts rows: the shortest split and the most splits a row gets.
// The uniform plan (min_split_tokens, at most uniform_max_splits: the count
// that fills the last wave when every row is as long as the longest) serves
// steps whose rows are within 25% of even; under by_step_work, other steps cut
// their keys into ~target_blocks blocks, so a few long rows beside short ones
// are cut finely. Every block of the split and combine kernels computes the
// same plan. No row has more keys than the step, so none needs more than
// ceil(target_blocks / pairs_per_row) splits; the grid's max_splits covers
// both (plan_split()).
struct StepSplit {
  int min_split_tokens, max_splits;
};
__device__ __forceinline__ StepSplit step_split(const StepDeviceView& step, const SplitParams& p) {
  const StepSplit uniform{p.min_split_tokens, p.uniform_max_splits};
  if (p.target_blocks == 0) return uniform;
  const StepKeys keys = step_split_keys(step);
  if (4LL * keys.longest * step.num_split_rows <= 5LL * keys.total) return uniform;
  const long long by_work = (keys.total * p.pairs_per_row + p.target_blocks - 1) / p.target_blocks;
  return {static_cast<int>(max(static_cast<long long>(p.min_split_tokens), min(by_work, 1LL << 30))), p.max_splits};
}

__device__ __forceinline__ RowSplit split_of(int kv_len, const StepSplit& plan, const SplitParams& p) {
  int n = (kv_len + plan.min_split_tokens - 1) / plan.min_split_tokens;
  n = n < 1 ? 1 : n > plan.max_splits ? plan.max_splits : n;
  const int per_split = (kv_len + n - 1) / n;
  const int tokens = (per_split + p.split_align - 1) / p.split_align * p.split_align;
  return {(kv_len + tokens - 1) / tokens, tokens};
}

// A key's slot in the paged cache: its page from the sequence's block table,
// then its place in the page.
__device__ __forceinline__ std::int64_t slot_of(const std::int32_t* table, int key, const SplitParams& p) {
  if (p.block_shift >= 0)
    return (static_cast<std::int64_t>(table[key >> p.block_shift]) << p.block_shift) +
           (key & ((1 << p.block_shift) - 1));
  return static_cast<std::int64_t>(table[key / p.block_size]) * p.block_size + key % p.block_size;
}

__device__ __forceinline__ void unpack8(uint4 raw, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// Before pdl_wait(): pulls the first `num_keys` keys of this block's range
// into L2 while the previous kernels (RoPE, the KV page write) finish. Only
// keys computed in earlier steps: their pages are immutable during this step
// (the step's metadata too: it was copied in before the step's first kernel),
// while this step's new keys are being written right now.
__device__ __forceinline__ void prefetch_old_keys(const StepDeviceView& step, const SplitParams& p, int seq,
                                                  int head_offset, int head_dim, int key_begin, int key_end,
                                                  int num_keys) {
  const int old_end = min(min(key_end, step.seq_num_computed[seq]), key_begin + num_keys);
  const int lines_per_key = max(1, head_dim * 2 / 128);
  const std::int32_t* table = step.block_tables + step.seq_block_offset[seq];
  const std::int64_t key_stride = static_cast<std::int64_t>(p.num_kv_heads) * head_dim;
  for (int i = threadIdx.x; i < (old_end - key_begin) * lines_per_key; i += blockDim.x) {
    const int key = key_begin + i / lines_per_key;
    const std::int64_t off = slot_of(table, key, p) * key_stride + head_offset + (i % lines_per_key) * 64;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p.k_cache + off));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p.v_cache + off));
  }
}

// The fused merge, after a block has written its partials (every thread
// stored some) for heads [head_begin, head_begin + num_heads) of a split row:
// whether this block is the last of the row's num_splits blocks of its
// blockIdx.y to arrive, in which case the other blocks' partials are visible
// to it. It then resets the counter for the next launch (graph replays).
// The classic arrival pattern: each thread's stores, a fence, then one atomic
// a block; the last block fences again before it reads (past L1: __ldcg).
__device__ __forceinline__ bool last_to_arrive(const SplitParams& p, int row_index, int num_splits) {
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int* counter = p.arrivals + static_cast<std::int64_t>(row_index) * gridDim.y + blockIdx.y;
    const bool last = atomicAdd(counter, 1) == num_splits - 1;
    if (last) {  // every split has arrived: nothing else touches either counter this launch
      *counter = 0;
      if (p.steal_counters != nullptr)
        p.steal_counters[static_cast<std::int64_t>(row_index) * gridDim.y + blockIdx.y] = 0;
    }
    s_last = last;
  }
  __syncthreads();
  if (!s_last) return false;
  __threadfence();
  return true;
}

// The combine kernel's sums for one (split row, group of heads), by the last
// block to arrive (kThreads threads; `smem` holds num_heads * (num_splits + 1)
// floats). num_splits <= kFusedMergeMaxSplits = 32, so each lane of warp w
// reads one split's (m, l) of head w in one load; then each thread sums four
// dims of a head over the splits, eight 16-byte loads in flight: a few
// round trips to L2 in all.
template <int D, int kThreads>
__device__ void merge_splits(const SplitParams& p, int row, int row_index, int head_begin, int num_heads,
                             int num_splits, float* smem) {
  static_assert(kFusedMergeMaxSplits <= 32, "one lane a split");
  constexpr int kWarpsHere = kThreads / 32;
  constexpr int kQuads = D / 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* s_scale = smem;                           // [num_heads][num_splits]
  float* s_inv_l = smem + num_heads * num_splits;  // [num_heads]
  for (int g = warp; g < num_heads; g += kWarpsHere) {
    const std::int64_t base = (static_cast<std::int64_t>(row_index) * p.num_q_heads + head_begin + g) * p.max_splits;
    const float2 ml = lane < num_splits ? __ldcg(reinterpret_cast<const float2*>(p.ws_ml) + base + lane)
                                        : make_float2(-INFINITY, 0.0f);
    const float m_all = warp_max(ml.x);
    const float c = ml.x == -INFINITY ? 0.0f : exp2f(ml.x - m_all);
    if (lane < num_splits) s_scale[g * num_splits + lane] = c;
    const float l_all = warp_sum(ml.y * c);
    if (lane == 0) s_inv_l[g] = 1.0f / l_all;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_heads * kQuads; e += kThreads) {
    const int g = e / kQuads, quad = e % kQuads;
    const std::int64_t base = (static_cast<std::int64_t>(row_index) * p.num_q_heads + head_begin + g) * p.max_splits;
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int s = 0; s < num_splits; ++s) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p.ws_acc + (base + s) * D) + quad);
      const float c = s_scale[g * num_splits + s];
      a.x += v.x * c;
      a.y += v.y * c;
      a.z += v.z * c;
      a.w += v.w * c;
    }
    const float inv_l = s_inv_l[g];
    auto* out = reinterpret_cast<__nv_bfloat162*>(
        p.out + (static_cast<std::int64_t>(row) * p.num_q_heads + head_begin + g) * D + quad * 4);
    out[0] = __floats2bfloat162_rn(a.x * inv_l, a.y * inv_l);
    out[1] = __floats2bfloat162_rn(a.z * inv_l, a.w * inv_l);
  }
}

template <int D, int kGroup>
__global__ void __launch_bounds__(kWarps * 32)
    split_kernel(StepDeviceView step, SplitParams p) {
  pdl_launch_dependents();
  constexpr int kDims = kGroup >= 4 ? 8 : 16;  // dims a lane holds (registers bound occupancy)
  constexpr int kVec = kDims / 8;               // 16-byte pieces a lane holds
  constexpr int kLanesPerKey = D / kDims;
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kTileKeys = kTileBytes / (D * 2);
  constexpr int kChunksPerRow = D / 8;
  static_assert(kTileKeys % (2 * kWarps * kKeysPerWarp) == 0, "tile must split evenly over warps");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* s_k = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kStages][kTileKeys][D]
  auto* s_v = s_k + kStages * kTileKeys * D;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int lane_group = lane / kLanesPerKey, sub = lane % kLanesPerKey;
  auto dim_of = [&](int v, int i) { return v * (D / kVec) + sub * 8 + i; };

  const int row_index = blockIdx.z;
  const int row = step.split_rows[row_index];
  const int seq = step.row_sequence[row];
  const int kv_len = step.positions[row] + 1;
  const int kv_head = blockIdx.y / p.head_chunks;
  const int group_size = p.num_q_heads / p.num_kv_heads;
  const int head_begin = kv_head * group_size + (blockIdx.y % p.head_chunks) * kGroup;
  const int num_heads_here = min(kGroup, kv_head * group_size + group_size - head_begin);
  const RowSplit split = split_of(kv_len, step_split(step, p), p);
  if (static_cast<int>(blockIdx.x) >= split.num_splits) {  // this row needs fewer splits than the grid has
    pdl_wait();
    return;
  }
  const int key_begin = blockIdx.x * split.split_tokens;
  const int key_end = min(key_begin + split.split_tokens, kv_len);
  const std::int32_t* table = step.block_tables + step.seq_block_offset[seq];
  const std::int64_t key_stride = static_cast<std::int64_t>(p.num_kv_heads) * D;
  const int num_tiles = key_end > key_begin ? (key_end - key_begin + kTileKeys - 1) / kTileKeys : 0;
  prefetch_old_keys(step, p, seq, kv_head * D, D, key_begin, key_end, (kStages - 1) * kTileKeys);
  pdl_wait();

  // Producer: every thread copies some 16-byte chunks of the tile's K and V rows.
  auto load_tile = [&](int tile) {
    const int stage = tile % kStages;
    for (int c = tid; c < kTileKeys * kChunksPerRow; c += kWarps * 32) {
      const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      const int key = key_begin + tile * kTileKeys + r;
      const bool valid = key < key_end;
      std::int64_t off = 0;
      if (valid) {
        off = slot_of(table, key, p) * key_stride + kv_head * D + col;
      }
      cp_async_16(s_k + (stage * kTileKeys + r) * D + col, p.k_cache + off, valid);
      cp_async_16(s_v + (stage * kTileKeys + r) * D + col, p.v_cache + off, valid);
    }
  };
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < num_tiles) load_tile(t);
    cp_async_commit();
  }

  float q[kGroup][kDims];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      float f[8];
      if (g < num_heads_here) {
        unpack8(*reinterpret_cast<const uint4*>(
                    p.q + (static_cast<std::int64_t>(row) * p.num_q_heads + head_begin + g) * D +
                    dim_of(v, 0)),
                f);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) f[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][v * 8 + i] = f[i] * p.scale_log2;
    }
  }
  float m[kGroup], l[kGroup], acc[kGroup][kDims];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc[g][i] = 0.0f;
  }

  for (int tile = 0; tile < num_tiles; ++tile) {
    // Keep kStages - 1 tiles in flight: issue tile + kStages - 1, then wait for `tile`.
    if (tile + kStages - 1 < num_tiles) load_tile(tile + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();
    const int stage = tile % kStages;
    const __nv_bfloat16* tk = s_k + stage * kTileKeys * D;
    const __nv_bfloat16* tv = s_v + stage * kTileKeys * D;
    const int tile_key0 = key_begin + tile * kTileKeys;
    // Two keys per lane group per step share one softmax rescale.
    constexpr int kRowsPerPass = kWarps * kKeysPerWarp;
    constexpr int kSteps = kTileKeys / (2 * kRowsPerPass);
#pragma unroll 1
    for (int st = 0; st < kSteps; ++st) {
      int r[2];
      bool valid[2];
      float s_g[2][kGroup];
      float vf[2][kDims];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        r[u] = ((2 * st + u) * kWarps + warp) * kKeysPerWarp + lane_group;  // row in the tile
        valid[u] = tile_key0 + r[u] < key_end;
        float kf[kDims];
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          float f[8];
          unpack8(*reinterpret_cast<const uint4*>(tk + r[u] * D + dim_of(v, 0)), f);
#pragma unroll
          for (int i = 0; i < 8; ++i) kf[v * 8 + i] = f[i];
          unpack8(*reinterpret_cast<const uint4*>(tv + r[u] * D + dim_of(v, 0)), f);
#pragma unroll
          for (int i = 0; i < 8; ++i) vf[u][v * 8 + i] = f[i];
        }
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < kDims; ++i) dot += q[g][i] * kf[i];
#pragma unroll
          for (int o = kLanesPerKey / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
          s_g[u][g] = valid[u] ? dot : -INFINITY;
        }
      }
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        const float m_new = fmaxf(m[g], fmaxf(s_g[0][g], s_g[1][g]));
        if (m_new == -INFINITY) continue;
        const float correction = exp2f(m[g] - m_new);
        const float p0 = exp2f(s_g[0][g] - m_new), p1 = exp2f(s_g[1][g] - m_new);
        m[g] = m_new;
        l[g] = l[g] * correction + p0 + p1;
#pragma unroll
        for (int i = 0; i < kDims; ++i) acc[g][i] = acc[g][i] * correction + p0 * vf[0][i] + p1 * vf[1][i];
      }
    }
    __syncthreads();  // the stage is rewritten kStages - 1 tiles later
  }
  cp_async_wait<0>();

  // Merge the lane groups of each warp (lanes with equal `sub` hold equal dims).
#pragma unroll
  for (int o = kLanesPerKey; o < 32; o <<= 1) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float l_o = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float m_new = fmaxf(m[g], m_o);
      const float c_self = m_new == -INFINITY ? 0.0f : exp2f(m[g] - m_new);
      const float c_other = m_new == -INFINITY ? 0.0f : exp2f(m_o - m_new);
      l[g] = l[g] * c_self + l_o * c_other;
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        const float a_o = __shfl_xor_sync(0xffffffffu, acc[g][i], o);
        acc[g][i] = acc[g][i] * c_self + a_o * c_other;
      }
      m[g] = m_new;
    }
  }

  // Merge the warps through shared memory (the K/V ring is free now).
  __syncthreads();
  float* sm_acc = reinterpret_cast<float*>(smem_raw);  // [kWarps][kGroup][D]
  float* sm_m = sm_acc + kWarps * kGroup * D;          // [kWarps][kGroup]
  float* sm_l = sm_m + kWarps * kGroup;
  if (lane_group == 0) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
#pragma unroll
      for (int v = 0; v < kVec; ++v)
#pragma unroll
        for (int i = 0; i < 8; ++i) sm_acc[(warp * kGroup + g) * D + dim_of(v, i)] = acc[g][v * 8 + i];
      if (sub == 0) {
        sm_m[warp * kGroup + g] = m[g];
        sm_l[warp * kGroup + g] = l[g];
      }
    }
  }
  __syncthreads();
  for (int e = tid; e < kGroup * D; e += kWarps * 32) {
    const int g = e / D, d = e % D;
    if (g >= num_heads_here) continue;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, sm_m[w * kGroup + g]);
    float l_all = 0.0f, a_all = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float c = m_all == -INFINITY ? 0.0f : exp2f(sm_m[w * kGroup + g] - m_all);
      l_all += sm_l[w * kGroup + g] * c;
      a_all += sm_acc[(w * kGroup + g) * D + d] * c;
    }
    const int head = head_begin + g;
    if (split.num_splits == 1) {
      p.out[(static_cast<std::int64_t>(row) * p.num_q_heads + head) * D + d] =
          __float2bfloat16(a_all / l_all);
    } else {
      const std::int64_t part =
          (static_cast<std::int64_t>(row_index) * p.num_q_heads + head) * p.max_splits +
          blockIdx.x;
      p.ws_acc[part * D + d] = a_all;
      if (d == 0) {
        p.ws_ml[part * 2] = m_all;
        p.ws_ml[part * 2 + 1] = l_all;
      }
    }
  }
  if (split.num_splits == 1 || p.arrivals == nullptr || !last_to_arrive(p, row_index, split.num_splits)) return;
  merge_splits<D, kWarps * 32>(p, row, row_index, head_begin, num_heads_here, split.num_splits,
                               reinterpret_cast<float*>(smem_raw));
}

template <int D, int kGroup>
void launch_split(dim3 grid, const Launch& launch, const StepDeviceView& step, const SplitParams& p) {
  constexpr int kSmemBytes = 2 * kStages * kTileBytes;
  static_assert(kWarps * kGroup * D * 4 + 2 * kWarps * kGroup * 4 <= kSmemBytes, "merge must fit the ring");
  static bool attribute_set = false;  // once per process: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(split_kernel<D, kGroup>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    attribute_set = true;
  }
  launch_kernel(split_kernel<D, kGroup>, grid, dim3(kWarps * 32), kSmemBytes, launch, step, p);
}

// The same split-KV decode on tensor cores, for GQA groups of 2..16 heads:
// the group's query heads are the 16 rows of an mma tile (zero-padded), so a
// key costs a few mma instead of G * D * 2 FMAs on CUDA cores, which bounded
// the kernel above at ~2 TB/s for groups of 4. Each of kW warps takes 16 keys
// of a 16 * kW-key tile (staged by cp.async, padded rows for ldmatrix) and
// keeps its own softmax state; the warps merge at the end like the kernel
// above. kW = 4: 64-key tiles. 8 warps over 128-key tiles (213 KB with 3
// stages, one block a multiprocessor) read 15% less at batch 64 (run 11).
// Fewer warps over deeper rings of the same 74 KB read less too (S10-1: 2
// warps x 4 stages of 32 keys 54-62% of HBM, 1 x 8 of 16 keys 32-38%, against
// 73-90% here): the kernel is bound by its warps' instruction issue (12 warps
// a multiprocessor, 0.63 eligible a scheduler), not by bytes in flight; an L2
// prefetch of the tile after the ring's (more bytes in flight, more
// instructions) lost 7-10 points.
constexpr int kMmaWarps = 4;
// Stages of the K/V ring: one tile in flight while one is computed (72 KB:
// three blocks a multiprocessor). With each row's own split plan a 3-stage
// ring (108 KB, two blocks; deleted) read less at every measured shape: batch
// 64 @ 8k 2,317 against 2,648 tok/s, batch 8 983 against 1,042, decode
// attention 64 x 8k alone 2.88 against 3.47 TB/s, batch 1 within noise
// (S3-d2). Before that plan, with one 8192-key split a row, 2 stages had lost
// 7% (run 9: 512 blocks in 396 slots, a second wave a third full).
constexpr int kMmaStages = 2;

// The tensor-core kernels' first steps after pdl_wait(): the kQRows query
// heads from head_begin (zero rows past num_heads) into s_q ([kQRows][D + 8]).
template <int D, int kThreads, int kQRows>
__device__ __forceinline__ void copy_q_rows(const SplitParams& p, int row, int head_begin, int num_heads,
                                            __nv_bfloat16* s_q) {
  constexpr int kChunksPerRow = D / 8;
  for (int c = threadIdx.x; c < kQRows * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const bool valid = r < num_heads;
    cp_async_16(s_q + r * (D + 8) + col,
                p.q + (static_cast<std::int64_t>(row) * p.num_q_heads + head_begin + (valid ? r : 0)) * D + col,
                valid);
  }
}

// One K/V tile of kTileKeys keys from key `first` (keys from key_end on read
// as zeros) into a ring stage of [kTileKeys][D + 8] rows. A thread copies the
// same 16-byte column of kPasses rows; every page-table read comes first,
// then the copies: one dependent round trip a tile, not one a row.
template <int D, int kThreads, int kTileKeys>
__device__ __forceinline__ void copy_kv_tile(const SplitParams& p, const std::int32_t* table, int kv_head, int first,
                                             int key_end, __nv_bfloat16* s_k, __nv_bfloat16* s_v) {
  constexpr int kStride = D + 8;
  constexpr int kChunksPerRow = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;  // tile rows one pass of the block copies
  constexpr int kPasses = kTileKeys / kRowsPerPass;
  static_assert(kThreads % kChunksPerRow == 0 && kTileKeys % kRowsPerPass == 0, "tile copy must be even");
  const int copy_row = threadIdx.x / kChunksPerRow, copy_col = (threadIdx.x % kChunksPerRow) * 8;
  const std::int64_t key_stride = static_cast<std::int64_t>(p.num_kv_heads) * D;
  std::int64_t off[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int key = first + copy_row + i * kRowsPerPass;
    off[i] = key < key_end ? slot_of(table, key, p) * key_stride + kv_head * D + copy_col : -1;
  }
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int r = copy_row + i * kRowsPerPass;
    const bool valid = off[i] >= 0;
    const std::int64_t src = valid ? off[i] : 0;
    cp_async_16(s_k + r * kStride + copy_col, p.k_cache + src, valid);
    cp_async_16(s_v + r * kStride + copy_col, p.v_cache + src, valid);
  }
}

// The tensor-core kernels' end: each warp has put its unnormalised O, running
// max and sum for the block's heads in sm_o [kW][kQRows][D], sm_m and sm_l
// [kW][kQRows]; the block merges them and writes the row's output (one
// split) or this split's partial, then merges the row's splits if it is the
// last block to arrive.
template <int D, int kW, int kQRows>
__device__ void finish_split_block(const SplitParams& p, int row, int row_index,
                                   int head_begin, int num_heads, int num_splits, const float* sm_o,
                                   const float* sm_m, const float* sm_l) {
  constexpr int kThreads = kW * 32;
  for (int e = threadIdx.x; e < num_heads * D; e += kThreads) {
    const int g = e / D, d = e % D;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kW; ++w) m_all = fmaxf(m_all, sm_m[w * kQRows + g]);
    float l_all = 0.0f, a_all = 0.0f;
#pragma unroll
    for (int w = 0; w < kW; ++w) {
      const float c = m_all == -INFINITY ? 0.0f : exp2f(sm_m[w * kQRows + g] - m_all);
      l_all += sm_l[w * kQRows + g] * c;
      a_all += sm_o[(w * kQRows + g) * D + d] * c;
    }
    const int head = head_begin + g;
    if (num_splits == 1) {
      p.out[(static_cast<std::int64_t>(row) * p.num_q_heads + head) * D + d] = __float2bfloat16(a_all / l_all);
    } else {
      const std::int64_t part =
          (static_cast<std::int64_t>(row_index) * p.num_q_heads + head) * p.max_splits + blockIdx.x;
      p.ws_acc[part * D + d] = a_all;
      if (d == 0) {
        p.ws_ml[part * 2] = m_all;
        p.ws_ml[part * 2 + 1] = l_all;
      }
    }
  }
  if (num_splits == 1 || p.arrivals == nullptr || !last_to_arrive(p, row_index, num_splits)) return;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  merge_splits<D, kThreads>(p, row, row_index, head_begin, num_heads, num_splits, reinterpret_cast<float*>(smem_raw));
}

// A tensor-core split block's shared memory: the Q tile of kQRows heads,
// then a ring of kRing K and V tiles of 16 keys a warp ([kTileKeys][D + 8]
// rows each: the padding keeps ldmatrix free of bank conflicts).
template <int D, int kW, int kQRows, int kRing>
struct MmaRing {
  static constexpr int kTileKeys = 16 * kW;
  static constexpr int kStride = D + 8;
  __nv_bfloat16* q;
  __nv_bfloat16* k;
  __nv_bfloat16* v;
  // Its bytes: the Q tile, then the ring, or (reused once the keys are done)
  // the warps' partial states, whichever is larger.
  static constexpr int kSmemBytes = [] {
    const int ring = 2 * kRing * kTileKeys * kStride * 2;
    const int merge = kW * kQRows * D * 4 + 2 * kW * kQRows * 4;
    return kQRows * kStride * 2 + (ring > merge ? ring : merge);
  }();
  __device__ explicit MmaRing(unsigned char* smem)
      : q(reinterpret_cast<__nv_bfloat16*>(smem)), k(q + kQRows * kStride), v(k + kRing * kTileKeys * kStride) {}
  // Warp `warp`'s 16 rows of tile `tile`'s stage.
  __device__ const __nv_bfloat16* k_rows(int tile, int warp) const {
    return k + ((tile % kRing) * kTileKeys + warp * 16) * kStride;
  }
  __device__ const __nv_bfloat16* v_rows(int tile, int warp) const {
    return v + ((tile % kRing) * kTileKeys + warp * 16) * kStride;
  }
  // Starts the copy of tile `tile` of keys [key_begin, key_end) into its stage.
  __device__ void load(const SplitParams& p, const std::int32_t* table, int kv_head, int key_begin, int key_end,
                       int tile) const {
    const int stage = tile % kRing;
    copy_kv_tile<D, kW * 32, kTileKeys>(p, table, kv_head, key_begin + tile * kTileKeys, key_end,
                                        k + stage * kTileKeys * kStride, v + stage * kTileKeys * kStride);
  }
};

// Where a tensor-core split block starts: its row, split, kv head, the
// kQRows query heads from head_begin (num_heads of them real) and its keys.
// start_mma_block() computes it, waits for the previous kernel, and starts
// the copies of Q and of the ring's first kRing - 1 tiles (one commit
// group each, the first also carrying Q); num_tiles < 0: the row has fewer
// splits than the grid, and the block has nothing to do. next_tile() then
// starts tile + kRing - 1's copy and waits for `tile`'s.
struct MmaBlock {
  int row, kv_head, head_begin, num_heads, key_begin, key_end, num_tiles;
  RowSplit split;
  const std::int32_t* table;
};
// The part both loaders share: the block's place, `prefetch(b, seq)` (an L2
// prefetch of the old keys it reads first), pdl_wait(), then
// `start_loads(b)` (the loader's first copies) where the block has keys.
template <int D, int kQRows, int kTileKeys, class Prefetch, class StartLoads>
__device__ __forceinline__ MmaBlock place_mma_block(const StepDeviceView& step, const SplitParams& p,
                                                    const Prefetch& prefetch, const StartLoads& start_loads) {
  MmaBlock b;
  b.row = step.split_rows[blockIdx.z];
  const int seq = step.row_sequence[b.row];
  const int kv_len = step.positions[b.row] + 1;
  b.split = split_of(kv_len, step_split(step, p), p);
  if (static_cast<int>(blockIdx.x) >= b.split.num_splits) {
    pdl_wait();
    b.num_tiles = -1;
    return b;
  }
  b.kv_head = blockIdx.y / p.head_chunks;
  const int group_size = p.num_q_heads / p.num_kv_heads;
  b.head_begin = b.kv_head * group_size + (blockIdx.y % p.head_chunks) * kQRows;
  b.num_heads = min(kQRows, b.kv_head * group_size + group_size - b.head_begin);
  b.key_begin = blockIdx.x * b.split.split_tokens;
  b.key_end = min(b.key_begin + b.split.split_tokens, kv_len);
  b.table = step.block_tables + step.seq_block_offset[seq];
  b.num_tiles = (b.key_end - b.key_begin + kTileKeys - 1) / kTileKeys;
  prefetch(b, seq);
  pdl_wait();
  start_loads(b);
  return b;
}
template <int D, int kW, int kQRows, int kRing>
__device__ __forceinline__ MmaBlock start_mma_block(const StepDeviceView& step, const SplitParams& p,
                                                    const MmaRing<D, kW, kQRows, kRing>& ring) {
  constexpr int kTileKeys = MmaRing<D, kW, kQRows, kRing>::kTileKeys;
  const auto prefetch = [&](const MmaBlock& b, int seq) {
    prefetch_old_keys(step, p, seq, b.kv_head * D, D, b.key_begin, b.key_end, (kRing - 1) * kTileKeys);
  };
  return place_mma_block<D, kQRows, kTileKeys>(step, p, prefetch, [&](const MmaBlock& b) {
    copy_q_rows<D, kW * 32, kQRows>(p, b.row, b.head_begin, b.num_heads, ring.q);
#pragma unroll
    for (int t = 0; t < kRing - 1; ++t) {
      if (t < b.num_tiles) ring.load(p, b.table, b.kv_head, b.key_begin, b.key_end, t);
      cp_async_commit();
    }
  });
}
template <int D, int kW, int kQRows, int kRing>
__device__ __forceinline__ void next_tile(const SplitParams& p, const MmaBlock& b,
                                          const MmaRing<D, kW, kQRows, kRing>& ring, int tile) {
  if (tile + kRing - 1 < b.num_tiles) ring.load(p, b.table, b.kv_head, b.key_begin, b.key_end, tile + kRing - 1);
  cp_async_commit();
  cp_async_wait<kRing - 1>();
  __syncthreads();
}

// The keys-as-rows kernel's ring under TMA loads (DecodeSplitLoads::tma).
// Each warp owns its 16 keys of every tile, so each warp fills its own
// slices: lane 0 issues one box a 64-dim line of K and of V (a page's head
// slice, or 16 keys of a larger page: split and tile starts are multiples of
// 64 keys and pages a power of two >= 16, so a slice never crosses a page),
// completing on the warp's mbarrier for that stage; the warp waits on it, and
// refills the stage's K once its QK mma have read it and its V after the PV
// mma. No block-wide barrier in the loop.
//
// Layout: a stage's K (then V) is kLines blocks of [kTileKeys keys][128 B],
// line l holding dims [64 l, 64 l + 64) of each key, written by the TMA's
// 128-byte swizzle: the 16-byte piece c of a key's line sits at c ^ (key %
// 8) (every box starts at a 1024-byte boundary), so the 8 rows an ldmatrix
// reads fall in 8 different bank groups, as the cp.async ring's padded rows
// do. Then Q ([8][D + 8], cp.async as there) and the kRing x kW mbarriers.
constexpr int kTmaBoxKeys = 16;   // a warp's keys of a tile: the box's slots
constexpr int kTmaLineDims = 64;  // a box's dims: 128 bytes, the swizzle's span
template <int D, int kW, int kRing>
struct TmaKvRing {
  static constexpr int kTileKeys = kTmaBoxKeys * kW;
  static constexpr int kStride = D + 8;  // Q's rows
  static constexpr int kLineBytes = kTmaLineDims * 2;
  static constexpr int kLines = D / kTmaLineDims;
  static constexpr int kBoxBytes = kTmaBoxKeys * kLineBytes;
  static constexpr int kLineTileBytes = kTileKeys * kLineBytes;  // one line of a tile's keys
  static constexpr int kStageBytes = kLines * kLineTileBytes;    // K (or V) of a tile
  static constexpr int kWarpTxBytes = 2 * kLines * kBoxBytes;    // K and V of a warp's slice
  static_assert(D % kTmaLineDims == 0, "whole 128-byte lines");
  // 1 KB to align the ring to the swizzle's 1024 bytes, the ring, Q, the
  // barriers; the warps' partial states reuse the ring at the end.
  static constexpr int kSmemBytes = 1024 + 2 * kRing * kStageBytes + 8 * kStride * 2 + kRing * kW * 8;
  static_assert(kW * 8 * D * 4 + 2 * kW * 8 * 4 <= 2 * kRing * kStageBytes, "the merge must fit the ring");
  unsigned char* k;
  unsigned char* v;
  __nv_bfloat16* q;
  std::uint64_t* full;  // [kRing][kW]: stage s of warp w's slice has landed

  __device__ explicit TmaKvRing(unsigned char* smem)
      : k(align_smem_1024(smem).ptr),
        v(k + kRing * kStageBytes),
        q(reinterpret_cast<__nv_bfloat16*>(v + kRing * kStageBytes)),
        full(reinterpret_cast<std::uint64_t*>(q + 8 * kStride)) {}

  // The 16 bytes of row `row` of warp `warp`'s keys, 16-byte piece `chunk`
  // of the key's D * 2 bytes, in tile `tile`'s K (or V) stage.
  __device__ static const void* piece(const unsigned char* stage, int warp, int row, int chunk) {
    return stage + (chunk / 8) * kLineTileBytes + (warp * kTmaBoxKeys + row) * kLineBytes +
           ((chunk % 8) ^ (row % 8)) * 16;
  }
  __device__ const void* k_piece(int tile, int warp, int row, int chunk) const {
    return piece(k + (tile % kRing) * kStageBytes, warp, row, chunk);
  }
  __device__ const void* v_piece(int tile, int warp, int row, int chunk) const {
    return piece(v + (tile % kRing) * kStageBytes, warp, row, chunk);
  }
  __device__ std::uint32_t bar(int tile, int warp) const { return smem_addr(full + (tile % kRing) * kW + warp); }

  // Lane 0 of each warp, before its first copy: its kRing barriers, one
  // arrival (its own) a phase.
  __device__ void init(int warp) const {
    for (int s = 0; s < kRing; ++s) mbarrier_init(smem_addr(full + s * kW + warp), 1);
    fence_mbarrier_init_cluster();
  }
  // Lane 0: the phase of tile `tile`'s barrier expects the slice's K and V
  // bytes (none at slot -1) and gets its one arrival; the K boxes start.
  __device__ void start_k(const CUtensorMap* map, const MmaBlock& b, int tile, int warp, int slot) const {
    const std::uint32_t full_bar = bar(tile, warp);
    if (slot >= 0) {
      mbarrier_expect_tx(full_bar, kWarpTxBytes);
#pragma unroll
      for (int line = 0; line < kLines; ++line)
        tma_load_3d(smem_addr(k + (tile % kRing) * kStageBytes + line * kLineTileBytes + warp * kBoxBytes), map,
                    line * kTmaLineDims, b.kv_head, slot, full_bar);
    }
    mbarrier_arrive(full_bar);
  }
  // Lane 0, after start_k of the same tile: the V boxes (the phase cannot
  // complete before they land: it expects their bytes).
  __device__ void start_v(const CUtensorMap* map, const MmaBlock& b, int tile, int warp, int slot) const {
    if (slot < 0) return;
#pragma unroll
    for (int line = 0; line < kLines; ++line)
      tma_load_3d(smem_addr(v + (tile % kRing) * kStageBytes + line * kLineTileBytes + warp * kBoxBytes), map,
                  line * kTmaLineDims, b.kv_head, slot, bar(tile, warp));
  }
  // The whole warp: waits for its slice of tile `tile`, whose first `valid`
  // keys are in range. Rows of keys past it get zero V (the box brought the
  // page's stale slots, or nothing: a stage's bytes from an older tile or
  // never written), since P = 0 times a NaN is NaN; K needs none (its scores
  // are masked by a select). The zeros are generic-proxy writes that the
  // stage's next TMA write must follow: each lane fences the proxies before
  // the warp syncs.
  __device__ void wait(int tile, int warp, int lane, int valid) const {
    mbarrier_wait(bar(tile, warp), (tile / kRing) & 1);
    if (valid >= kTmaBoxKeys) return;  // warp-uniform
    const int first_row = max(valid, 0);
    unsigned char* stage = v + (tile % kRing) * kStageBytes;
    for (int i = lane; i < (kTmaBoxKeys - first_row) * kLines * 8; i += 32) {
      const int row = first_row + i / (kLines * 8), line = (i / 8) % kLines;
      *reinterpret_cast<uint4*>(stage + line * kLineTileBytes + (warp * kTmaBoxKeys + row) * kLineBytes +
                                (i % 8) * 16) = make_uint4(0, 0, 0, 0);
    }
    fence_proxy_async();
    __syncwarp();
  }
};

// (TMA) The keys a warp takes, iteration by iteration: the first key of its
// 16-key slice at this iteration and at the kRing after it (the same in
// every lane), and the bound past which keys are masked.
//   Its split's keys (steal_counters null, or a row of one split): slice
//     `warp` of the block's tiles in turn, as the cp.async ring takes them.
//   Stealing (DecodeSplitLoads::tma_steal): a row's slices go to the W =
//     num_splits x kW warps of all its splits, the first kRing of each by a
//     fixed interleave (slice g + j W, g the warp's place among them), then
//     one at a time from the row's counter. So the warps on a slow SM take
//     fewer, and all end within a slice of each other: under split ranges
//     the median block's keys ended 86 us into a 98-us launch at 8 x 8k, the
//     first block's at 54 (S40-1, H100). Lane 0 claims a slice an iteration
//     before its copies start, so the atomic's latency passes under that
//     iteration.
template <int kW, int kRing>
struct WarpSlices {
  int first[kRing + 1];
  static constexpr int kTileKeys = kW * kTmaBoxKeys;  // own split: keys from one iteration's slice to the next
  int end;
  int* counter = nullptr;  // stealing: the row's counter
  int claimed_from = 0;    // stealing: the first slice claims hand out (kRing W)
  int pending = 0;         // stealing, lane 0: the slice claimed for kRing + 1 iterations on

  __device__ __forceinline__ void start(const SplitParams& p, const MmaBlock& b, int warp, int kv_len, bool steal) {
    if (!steal) {
#pragma unroll
      for (int j = 0; j <= kRing; ++j) first[j] = b.key_begin + j * kTileKeys + warp * kTmaBoxKeys;
      end = b.key_end;
      return;
    }
    const int warps = b.split.num_splits * kW, g = static_cast<int>(blockIdx.x) * kW + warp;
#pragma unroll
    for (int j = 0; j < kRing; ++j) first[j] = (g + j * warps) * kTmaBoxKeys;
    end = kv_len;
    counter = p.steal_counters + static_cast<std::int64_t>(blockIdx.z) * gridDim.y + blockIdx.y;
    claimed_from = kRing * warps;
    claim();
    first[kRing] = (claimed_from + __shfl_sync(0xffffffffu, pending, 0)) * kTmaBoxKeys;
  }
  __device__ __forceinline__ bool has_keys() const { return first[0] < end; }
  __device__ __forceinline__ int valid() const { return end - first[0]; }
  // Lane 0 only (under stealing): the next claim, used by advance().
  __device__ __forceinline__ void claim() {
    if (counter != nullptr && (threadIdx.x & 31) == 0) pending = atomicAdd(counter, 1);
  }
  // The whole warp, at the end of an iteration.
  __device__ __forceinline__ void advance() {
#pragma unroll
    for (int j = 0; j < kRing; ++j) first[j] = first[j + 1];
    first[kRing] = counter != nullptr ? (claimed_from + __shfl_sync(0xffffffffu, pending, 0)) * kTmaBoxKeys
                                      : first[kRing - 1] + kTileKeys;
  }
};

// The keys-as-rows kernel's start under either loader.
template <int D, int kW, int kRing>
__device__ __forceinline__ MmaBlock start_keys_block(const StepDeviceView& step, const SplitParams& p,
                                                     const MmaRing<D, kW, 8, kRing>& ring, const CUtensorMap*,
                                                     const CUtensorMap*, WarpSlices<kW, kRing>&) {
  return start_mma_block(step, p, ring);
}
// start_mma_block() for the TMA ring: Q's copy first, then each warp's lane
// 0 sets up its barriers and starts its slices of the first kRing tiles.
// Q goes first because it is what the first tile waits on: issued after the
// ring, its few bytes queued behind every block's first kRing tiles (~25 MB
// at 8 x 8k), and the median block began its keys 9.1 us into the launch,
// its first tile long landed (S39-1, H100). Q first, the keys start 1.7 us
// earlier but end as late (S40-2): HBM was busy with the first fill anyway.
// `slices`: the warp's keys (WarpSlices), set here.
template <int D, int kW, int kRing>
__device__ __forceinline__ MmaBlock start_keys_block(const StepDeviceView& step, const SplitParams& p,
                                                     const TmaKvRing<D, kW, kRing>& ring, const CUtensorMap* k_map,
                                                     const CUtensorMap* v_map, WarpSlices<kW, kRing>& slices) {
  using Ring = TmaKvRing<D, kW, kRing>;
  if (threadIdx.x == 0) {
    prefetch_tensor_map(k_map);
    prefetch_tensor_map(v_map);
  }
  const int warp = threadIdx.x >> 5;
  const auto stealing = [&](const MmaBlock& b) { return p.steal_counters != nullptr && b.split.num_splits > 1; };
  // The old keys of the block's first kRing - 1 tiles: its split's, or
  // under stealing its warps' first slices.
  const auto prefetch = [&](const MmaBlock& b, int seq) {
    if (!stealing(b)) {
      prefetch_old_keys(step, p, seq, b.kv_head * D, D, b.key_begin, b.key_end, (kRing - 1) * Ring::kTileKeys);
      return;
    }
    const int kv_len = step.positions[b.row] + 1, warps = b.split.num_splits * kW;
    for (int j = 0; j < kRing - 1; ++j)
      for (int w = 0; w < kW; ++w) {
        const int first = (static_cast<int>(blockIdx.x) * kW + w + j * warps) * kTmaBoxKeys;
        prefetch_old_keys(step, p, seq, b.kv_head * D, D, first, min(first + kTmaBoxKeys, kv_len), kTmaBoxKeys);
      }
  };
  return place_mma_block<D, 8, Ring::kTileKeys>(step, p, prefetch, [&](const MmaBlock& b) {
    copy_q_rows<D, kW * 32, 8>(p, b.row, b.head_begin, b.num_heads, ring.q);
    cp_async_commit();
    static_assert(WarpSlices<kW, kRing>::kTileKeys == Ring::kTileKeys, "a slice a warp a tile");
    slices.start(p, b, warp, step.positions[b.row] + 1, stealing(b));
    if ((threadIdx.x & 31) == 0) {
      ring.init(warp);
#pragma unroll
      for (int t = 0; t < kRing; ++t) {  // a slice past the keys: its stage's phase completes empty
        const int slot = slices.first[t] < slices.end ? static_cast<int>(slot_of(b.table, slices.first[t], p)) : -1;
        ring.start_k(k_map, b, t, warp, slot);
        ring.start_v(v_map, b, t, warp, slot);
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // Q, and each warp's barriers initialised before its other lanes wait on them
  });
}

template <int D, int kW>
__global__ void __launch_bounds__(kW * 32)
    split_mma_kernel(StepDeviceView step, SplitParams p) {
  pdl_launch_dependents();
  using Ring = MmaRing<D, kW, 16, kMmaStages>;
  constexpr int kTileKeys = Ring::kTileKeys;
  constexpr int kStride = Ring::kStride;
  constexpr int kKSteps = D / 16;
  constexpr int kNTilesO = D / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const Ring ring(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const MmaBlock b = start_mma_block(step, p, ring);
  if (b.num_tiles < 0) return;
  const int key_begin = b.key_begin, key_end = b.key_end;

  std::uint32_t q_frag[kKSteps][4];
  float o_acc[kNTilesO][4];
#pragma unroll
  for (int n = 0; n < kNTilesO; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) o_acc[n][i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int tile = 0; tile < b.num_tiles; ++tile) {
    next_tile(p, b, ring, tile);
    if (tile == 0) {
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks)
        ldmatrix_x4(q_frag[ks], ring.q + (lane % 16) * kStride + ks * 16 + (lane / 16) * 8);
    }
    const __nv_bfloat16* sk = ring.k_rows(tile, warp);
    const __nv_bfloat16* sv = ring.v_rows(tile, warp);
    const int key0 = key_begin + tile * kTileKeys + warp * 16;

    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      std::uint32_t b[4];
      ldmatrix_x4(b, sk + ((lane % 8) + (lane / 16) * 8) * kStride + ks * 16 + ((lane / 8) % 2) * 8);
      mma_16816(s[0], q_frag[ks], b[0], b[1]);
      mma_16816(s[1], q_frag[ks], b[2], b[3]);
    }
    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = key0 + n * 8 + (lane % 4) * 2 + (i & 1);
        const float v = key < key_end ? s[n][i] * p.scale_log2 : -INFINITY;
        s[n][i] = v;
        row_max[i / 2] = fmaxf(row_max[i / 2], v);
      }
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 1));
      row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 2));
      const float m_new = fmaxf(m_run[h], row_max[h]);
      correction[h] = m_new == -INFINITY ? 1.0f : exp2f(m_run[h] - m_new);
      m_run[h] = m_new;
    }
    float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float m = m_run[i / 2];
        const float pr = m == -INFINITY ? 0.0f : exp2f(s[n][i] - m);
        s[n][i] = pr;
        row_sum[i / 2] += pr;
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * correction[h] + row_sum[h];
    // O is rescaled only when some row's running max moved (a warp-uniform
    // branch): past the first tiles of a split it rarely does, and the
    // rescale is D / 2 multiplies a thread per 16 keys in an issue-bound
    // loop. Skipping a factor of exactly 1 changes no bit. Not timed apart
    // (S12-gqadec-1 measured it only together with the fused merge).
    if (__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < kNTilesO; ++n) {
        o_acc[n][0] *= correction[0];
        o_acc[n][1] *= correction[0];
        o_acc[n][2] *= correction[1];
        o_acc[n][3] *= correction[1];
      }
    }
    std::uint32_t a[4];
    a[0] = pack_bf16(s[0][0], s[0][1]);
    a[1] = pack_bf16(s[0][2], s[0][3]);
    a[2] = pack_bf16(s[1][0], s[1][1]);
    a[3] = pack_bf16(s[1][2], s[1][3]);
#pragma unroll
    for (int n = 0; n < kNTilesO; n += 2) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, sv + ((lane % 8) + ((lane / 8) % 2) * 8) * kStride + n * 8 + (lane / 16) * 8);
      mma_16816(o_acc[n], a, b[0], b[1]);
      mma_16816(o_acc[n + 1], a, b[2], b[3]);
    }
    __syncthreads();  // the stage is rewritten kMmaStages - 1 tiles later
  }
  cp_async_wait<0>();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  // Merge the warps' states through shared memory (the ring is free now).
  __syncthreads();
  float* sm_o = reinterpret_cast<float*>(ring.k);  // [kW][16][D]
  float* sm_m = sm_o + kW * 16 * D;             // [kW][16]
  float* sm_l = sm_m + kW * 16;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = lane / 4 + h * 8;
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n) {
      const int col = n * 8 + (lane % 4) * 2;
      sm_o[(warp * 16 + r) * D + col] = o_acc[n][2 * h];
      sm_o[(warp * 16 + r) * D + col + 1] = o_acc[n][2 * h + 1];
    }
    if (lane % 4 == 0) {
      sm_m[warp * 16 + r] = m_run[h];
      sm_l[warp * 16 + r] = l_run[h];
    }
  }
  __syncthreads();
  finish_split_block<D, kW, 16>(p, b.row, blockIdx.z, b.head_begin, b.num_heads, b.split.num_splits, sm_o,
                                sm_m, sm_l);
}

// The same block with keys as the mma's rows, for groups of up to 8 heads:
// S^T = K Q^T and O^T = V^T P^T on m16n8k16, a warp's 16 keys as M and the
// group's heads (zero-padded to 8) as N. With the heads as M (above) a group
// of 4 fills 4 of 16 rows, so three quarters of every QK and PV mma, of the
// exponentials and of the O registers were padding, in a kernel bound by its
// instruction issue (session 10's ncu); here half as many mma a key, half the
// softmax, and O in D / 4 registers instead of D / 2. P^T's accumulator
// fragment becomes the PV mma's B operand by two movmatrix transposes.
// The keys-as-rows kernel's tensor maps of the K and V caches under TMA
// loads; 8 unused bytes under cp.async (with an empty struct there nvcc
// loaded SplitParams' first pointer byte by byte; with 8 bytes the
// instance's PTX is main's but for this parameter's declaration).
template <bool kTma>
struct KvMaps {
  std::uint64_t unused;
};
template <>
struct KvMaps<true> {
  CUtensorMap k, v;
};

// kTma: the ring filled by TMA (TmaKvRing, `maps`), else by cp.async
// (MmaRing). One kernel body for both, in the kernel itself: a
// device-function wrapper changed the cp.async instance's loop, and a
// parameter pack of maps, which kept its code intact, does not compile on
// the host (GCC cannot take the address of such an instance).
template <int D, int kW, int kRing, bool kTma>
__global__ void __launch_bounds__(kW * 32)
    split_mma_keys_kernel(StepDeviceView step, SplitParams p, const __grid_constant__ KvMaps<kTma> maps) {
  const CUtensorMap* k_map = nullptr;
  const CUtensorMap* v_map = nullptr;
  if constexpr (kTma) {
    k_map = &maps.k;
    v_map = &maps.v;
  }
  pdl_launch_dependents();
  stamp(p, DecodeSplitMoment::entry);
  using Ring = std::conditional_t<kTma, TmaKvRing<D, kW, kRing>, MmaRing<D, kW, 8, kRing>>;
  constexpr int kTileKeys = Ring::kTileKeys;
  constexpr int kStride = Ring::kStride;
  constexpr int kKSteps = D / 16;
  constexpr int kDimTiles = D / 16;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const Ring ring(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  WarpSlices<kW, kRing> slices;  // TMA: each warp walks its own slices, no block barrier in the loop
  const MmaBlock b = start_keys_block(step, p, ring, k_map, v_map, slices);
  if (b.num_tiles < 0) return;
  stamp(p, DecodeSplitMoment::loads_started);

  // This thread's accumulator columns are heads 2 (lane % 4) and + 1; its
  // rows keys lane / 4 and + 8 of the warp's 16 (S^T), dims lane / 4 and + 8
  // of each 16-dim tile (O^T). m_run and l_run follow its two heads.
  std::uint32_t q_frag[kKSteps][2];
  float o_acc[kDimTiles][4];
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) o_acc[n][i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int tile = 0; kTma ? slices.has_keys() : tile < b.num_tiles; ++tile) {
    // TMA: lane 0's slot of the slice kRing iterations on, read from the
    // page table before the wait so that the read's latency passes under the
    // wait and the QK mma (-1: past the keys); its K and V copies start below.
    int refill_slot = -1;
    if constexpr (kTma) {
      slices.claim();
      if (lane == 0 && slices.first[kRing] < slices.end)
        refill_slot = static_cast<int>(slot_of(b.table, slices.first[kRing], p));
      ring.wait(tile, warp, lane, slices.valid());
    } else {
      next_tile(p, b, ring, tile);
    }
    if (tile == 0) {  // Q^T as B: a head's dims are a B column
      stamp(p, DecodeSplitMoment::first_tile);
#pragma unroll
      for (int ks = 0; ks < kKSteps; ks += 2) {
        std::uint32_t r[4];
        ldmatrix_x4(r, ring.q + (lane % 8) * kStride + ks * 16 + (lane / 8) * 8);
        q_frag[ks][0] = r[0];
        q_frag[ks][1] = r[1];
        q_frag[ks + 1][0] = r[2];
        q_frag[ks + 1][1] = r[3];
      }
    }
    const __nv_bfloat16* sk = nullptr;
    const __nv_bfloat16* sv = nullptr;
    if constexpr (!kTma) {
      sk = ring.k_rows(tile, warp);
      sv = ring.v_rows(tile, warp);
    }
    const int key0 = (kTma ? slices.first[0] : b.key_begin + tile * kTileKeys + warp * 16) + lane / 4;
    const int key_end = kTma ? slices.end : b.key_end;

    // Two accumulators over alternate k-steps: two independent mma chains.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      std::uint32_t a[4];
      if constexpr (kTma)
        ldmatrix_x4(a, ring.k_piece(tile, warp, (lane % 8) + ((lane / 8) % 2) * 8, 2 * ks + lane / 16));
      else
        ldmatrix_x4(a, sk + ((lane % 8) + ((lane / 8) % 2) * 8) * kStride + ks * 16 + (lane / 16) * 8);
      mma_16816(s[ks % 2], a, q_frag[ks][0], q_frag[ks][1]);
    }
    if constexpr (kTma) {  // every lane's K reads are done (their mma issued): refill the stage's K
      __syncwarp();
      if (lane == 0) ring.start_k(k_map, b, tile + kRing, warp, refill_slot);
    }
    float col_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = key0 + (i / 2) * 8;
      const float v = key < key_end ? (s[0][i] + s[1][i]) * p.scale_log2 : -INFINITY;
      s[0][i] = v;
      col_max[i % 2] = fmaxf(col_max[i % 2], v);
    }
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int offset = 4; offset < 32; offset <<= 1)
        col_max[h] = fmaxf(col_max[h], __shfl_xor_sync(0xffffffffu, col_max[h], offset));
      const float m_new = fmaxf(m_run[h], col_max[h]);
      correction[h] = m_new == -INFINITY ? 1.0f : exp2f(m_run[h] - m_new);
      m_run[h] = m_new;
    }
    float col_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float m = m_run[i % 2];
      const float pr = m == -INFINITY ? 0.0f : exp2f(s[0][i] - m);
      s[0][i] = pr;
      col_sum[i % 2] += pr;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * correction[h] + col_sum[h];
    // Rescaled only when a running max moved, as in the kernel above.
    if (__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        o_acc[n][0] *= correction[0];
        o_acc[n][1] *= correction[1];
        o_acc[n][2] *= correction[0];
        o_acc[n][3] *= correction[1];
      }
    }
    // P^T (keys x heads) as B: keys 0-7 and 8-15 of the warp, each an 8x8
    // half of the accumulator, transposed into B's layout.
    const std::uint32_t p_lo = movmatrix_trans(pack_bf16(s[0][0], s[0][1]));
    const std::uint32_t p_hi = movmatrix_trans(pack_bf16(s[0][2], s[0][3]));
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) {  // V^T as A: ldmatrix's transpose of V's [key][dim] rows
      std::uint32_t a[4];
      if constexpr (kTma)
        ldmatrix_x4_trans(a, ring.v_piece(tile, warp, (lane % 8) + (lane / 16) * 8, 2 * n + (lane / 8) % 2));
      else
        ldmatrix_x4_trans(a, sv + ((lane % 8) + (lane / 16) * 8) * kStride + n * 16 + ((lane / 8) % 2) * 8);
      mma_16816(o_acc[n], a, p_lo, p_hi);
    }
    if constexpr (kTma) {  // and its V, once every lane's V reads are done
      __syncwarp();
      if (lane == 0) ring.start_v(v_map, b, tile + kRing, warp, refill_slot);
      slices.advance();
    } else {
      __syncthreads();  // the stage is rewritten kRing - 1 tiles later
    }
  }
  cp_async_wait<0>();
  stamp(p, DecodeSplitMoment::keys_done);
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int offset = 4; offset < 32; offset <<= 1) l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], offset);
  // Merge the warps' states through shared memory (the ring is free now).
  __syncthreads();
  float* sm_o = reinterpret_cast<float*>(ring.k);  // [kW][8][D]
  float* sm_m = sm_o + kW * 8 * D;              // [kW][8]
  float* sm_l = sm_m + kW * 8;
  const int head0 = (lane % 4) * 2;
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      sm_o[(warp * 8 + head0 + i % 2) * D + n * 16 + lane / 4 + (i / 2) * 8] = o_acc[n][i];
  if (lane < 4) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sm_m[warp * 8 + head0 + h] = m_run[h];
      sm_l[warp * 8 + head0 + h] = l_run[h];
    }
  }
  __syncthreads();
  finish_split_block<D, kW, 8>(p, b.row, blockIdx.z, b.head_begin, b.num_heads, b.split.num_splits, sm_o, sm_m,
                               sm_l);
  stamp(p, DecodeSplitMoment::exit);
}

// The tensor-core kernels: heads as the mma's rows (groups of up to 16) or
// keys (up to 8, with a ring of kRing tiles, filled by cp.async or TMA).
template <int D, bool kKeysAsRows, int kRing, bool kTma = false>
constexpr auto* split_mma_kernel_for() {
  static_assert(kKeysAsRows || !kTma, "TMA loads: the keys-as-rows kernel only");
  if constexpr (kKeysAsRows)
    return &split_mma_keys_kernel<D, kMmaWarps, kRing, kTma>;
  else
    return &split_mma_kernel<D, kMmaWarps>;
}
template <int D, bool kKeysAsRows, int kRing, bool kTma = false>
constexpr int split_mma_smem_bytes() {
  if constexpr (kTma)
    return TmaKvRing<D, kMmaWarps, kRing>::kSmemBytes;
  else
    return MmaRing<D, kMmaWarps, kKeysAsRows ? 8 : 16, kRing>::kSmemBytes;
}

// `maps`: the TMA kernel's K and V cache maps (none for the others).
template <int D, bool kKeysAsRows, int kRing, bool kTma = false, class... Maps>
void launch_split_mma(dim3 grid, const Launch& launch, const StepDeviceView& step, const SplitParams& p,
                      const Maps&... maps) {
  constexpr int kSmemBytes = split_mma_smem_bytes<D, kKeysAsRows, kRing, kTma>();
  static_assert(kSmemBytes <= 227 * 1024, "one block must fit a multiprocessor");
  static bool attribute_set = false;  // once per process: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(split_mma_kernel_for<D, kKeysAsRows, kRing, kTma>(),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    attribute_set = true;
  }
  if constexpr (kKeysAsRows)
    launch_kernel(split_mma_kernel_for<D, kKeysAsRows, kRing, kTma>(), grid, dim3(kMmaWarps * 32), kSmemBytes,
                  launch, step, p, KvMaps<kTma>{maps...});
  else
    launch_kernel(split_mma_kernel_for<D, kKeysAsRows, kRing, kTma>(), grid, dim3(kMmaWarps * 32), kSmemBytes,
                  launch, step, p);
}

// Blocks of a tensor-core kernel resident on the whole GPU (its shared
// memory bounds them: 3 a multiprocessor at head_dim 128 with 2 stages,
// either loader).
template <int D, bool kKeysAsRows, int kRing, bool kTma>
int mma_resident_blocks() {
  static const int blocks = [] {
    constexpr int kSmemBytes = split_mma_smem_bytes<D, kKeysAsRows, kRing, kTma>();
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(split_mma_kernel_for<D, kKeysAsRows, kRing, kTma>(),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    int per_sm = 0, device = 0, sms = 0;
    SLUICE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, split_mma_kernel_for<D, kKeysAsRows, kRing, kTma>(), kMmaWarps * 32, kSmemBytes));
    SLUICE_CUDA_CHECK(cudaGetDevice(&device));
    SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return std::max(1, per_sm * sms);
  }();
  return blocks;
}

template <int D>
int mma_resident_blocks(bool keys_as_rows, int stages, bool tma) {
  if (!keys_as_rows) return mma_resident_blocks<D, false, kMmaStages, false>();
  if (tma) return stages == 3 ? mma_resident_blocks<D, true, 3, true>() : mma_resident_blocks<D, true, kMmaStages, true>();
  return stages == 3 ? mma_resident_blocks<D, true, 3, false>() : mma_resident_blocks<D, true, kMmaStages, false>();
}
int mma_resident_blocks(int head_dim, bool keys_as_rows, int stages, bool tma) {
  return head_dim == 64 ? mma_resident_blocks<64>(keys_as_rows, stages, tma)
                        : mma_resident_blocks<128>(keys_as_rows, stages, tma);
}

// The TMA ring's tensor map over one layer's K (or V) cache, [slots][kv
// heads][D] bf16 as three dimensions (dim, kv head, slot): boxes of 64 dims
// of one head at 16 consecutive slots, in the 128-byte swizzle TmaKvRing
// reads.
CUtensorMap kv_cache_tensor_map(const void* cache, const AttentionArgs& args) {
  CUtensorMap map{};
  const auto dim = static_cast<cuuint64_t>(args.head_dim);
  const cuuint64_t dims[3] = {dim, static_cast<cuuint64_t>(args.num_kv_heads),
                              static_cast<cuuint64_t>(args.kv_cache_slots)};
  const cuuint64_t strides[2] = {dim * 2, dim * 2 * static_cast<cuuint64_t>(args.num_kv_heads)};
  const cuuint32_t box[3] = {kTmaLineDims, 1, kTmaBoxKeys};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult result = encode_tensor_map()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(cache),
                                              dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SLUICE_CHECK_MSG(result == CUDA_SUCCESS, "split attention: cuTensorMapEncodeTiled failed for the KV cache");
  return map;
}

// One block per (row, query head): merges the splits. kParts groups of D
// threads each sum every kParts-th split (a long context has up to hundreds
// of splits; one thread per dim walking all of them was a chain of dependent
// L2 round trips), then group 0 adds the groups. The splits' scale factors go
// through shared memory first.
template <int D>
constexpr int combine_parts() {
  return D >= 256 ? 2 : 512 / D;
}

template <int D>
__global__ void __launch_bounds__(D * combine_parts<D>()) combine_kernel(StepDeviceView step, SplitParams p) {
  constexpr int kParts = combine_parts<D>();
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ float s_scale[];  // [max_splits]
  __shared__ float s_inv_l;
  __shared__ float s_part[kParts][D];
  const int row_index = blockIdx.x, head = blockIdx.y;
  const int d = threadIdx.x % D, part = threadIdx.x / D;
  const int row = step.split_rows[row_index];
  const int num_splits = split_of(step.positions[row] + 1, step_split(step, p), p).num_splits;
  if (num_splits == 1) return;  // the split kernel wrote this row's output
  const std::int64_t base = (static_cast<std::int64_t>(row_index) * p.num_q_heads + head) *
                            p.max_splits;
  if (threadIdx.x < 32) {
    float m_all = -INFINITY;
    for (int s = threadIdx.x; s < num_splits; s += 32) m_all = fmaxf(m_all, p.ws_ml[(base + s) * 2]);
    m_all = warp_max(m_all);
    float l_all = 0.0f;
    for (int s = threadIdx.x; s < num_splits; s += 32) {
      const float m_s = p.ws_ml[(base + s) * 2];
      const float c = m_s == -INFINITY ? 0.0f : exp2f(m_s - m_all);
      s_scale[s] = c;
      l_all += p.ws_ml[(base + s) * 2 + 1] * c;
    }
    l_all = warp_sum(l_all);
    if (threadIdx.x == 0) s_inv_l = 1.0f / l_all;
  }
  __syncthreads();
  float a_all = 0.0f;
#pragma unroll 4
  for (int s = part; s < num_splits; s += kParts) a_all += p.ws_acc[(base + s) * D + d] * s_scale[s];
  s_part[part][d] = a_all;
  __syncthreads();
  if (part != 0) return;
#pragma unroll
  for (int q = 1; q < kParts; ++q) a_all += s_part[q][d];
  p.out[(static_cast<std::int64_t>(row) * p.num_q_heads + head) * D + d] =
      __float2bfloat16(a_all * s_inv_l);
}

struct SplitPlan {
  int max_splits, min_split_tokens, split_align, head_chunks, group;
  bool keys_as_rows;  // tensor cores, keys as the mma rows: split_mma_keys_kernel (groups <= 8)
  int target_blocks, pairs_per_row;  // SplitParams' (0, 0 under uniform_waves)
  int uniform_max_splits;
};

// Splits for the tensor-core kernel: the count (up to by_len) whose blocks,
// all rows cut alike, leave the least of their last wave empty, the fewest
// among near-equals. Batch 64 x 8 kv heads in 396 slots: one split is 1.29
// waves (65% of the time busy), two 2.59 (86%), three 3.88 (97%).
int splits_by_waves(std::int64_t pairs, int by_len, int resident_blocks) {
  int best = 1;
  double best_score = 0.0;
  for (int n = 1; n <= std::min(by_len, 256); ++n) {
    const double waves = static_cast<double>(pairs) * n / resident_blocks;
    const double busy = waves / std::ceil(waves);
    const double score = busy - 0.01 * (n - 1);  // every split adds a partial to merge
    if (score > best_score + 1e-9) {
      best = n;
      best_score = score;
    }
  }
  return best;
}

// Whether the split-KV decode runs split_mma_keys_kernel: tensor cores
// (head_dim 64 or 128, groups of 2..8) and keys_as_rows asked for.
bool runs_keys_as_rows(const AttentionArgs& args) {
  const int group_size = args.num_q_heads / args.num_kv_heads;
  return group_size >= 2 && group_size <= 8 && (args.head_dim == 64 || args.head_dim == 128) &&
         args.decode_split_tiles == DecodeSplitTiles::keys_as_rows;
}

// The grid's splits come from the longest key range the launch must cover
// (the bucket under graphs, so the grid is fixed while the graph replays);
// each row then cuts its own keys (split_of()), by the step's work or by the
// uniform plan.
SplitPlan plan_split(const StepDeviceView& step, const AttentionArgs& args) {
  const int group_size = args.num_q_heads / args.num_kv_heads;
  const bool tensor_cores = group_size >= 2 && (args.head_dim == 64 || args.head_dim == 128);
  SLUICE_CHECK_MSG(args.decode_split_stages == 2 || args.decode_split_stages == 3,
                   "split attention: the keys-as-rows ring holds 2 or 3 tiles");
  const bool keys_as_rows = runs_keys_as_rows(args);
  const bool tma = split_tma_loads_apply(args);
  const int kernel_group = keys_as_rows  ? 8
                           : tensor_cores ? 16
                           : group_size <= 1 ? 1
                           : group_size <= 2 ? 2
                           : group_size <= 4 ? 4
                                             : 8;
  const int head_chunks = (group_size + kernel_group - 1) / kernel_group;
  const int tile_keys = tensor_cores ? 16 * kMmaWarps : kTileBytes / (args.head_dim * 2);
  // No split shorter than 128 keys (below that the merge costs more than it saves).
  constexpr int kMinSplitTokens = 128;
  const int min_split_tokens = std::max(kMinSplitTokens, tile_keys);
  const int pairs_per_row = args.num_kv_heads * head_chunks;
  const std::int64_t pairs = std::max<std::int64_t>(1, static_cast<std::int64_t>(step.num_split_rows) * pairs_per_row);
  const int max_kv = std::max(1, step.max_split_kv_tokens);
  const int by_len = (max_kv + min_split_tokens - 1) / min_split_tokens;
  int uniform_splits = 1;
  if (tensor_cores) {
    uniform_splits =
        splits_by_waves(pairs, by_len, mma_resident_blocks(args.head_dim, keys_as_rows, args.decode_split_stages, tma));
  } else {
    // The CUDA-core kernel: enough blocks to fill the GPU about four times over.
    constexpr int kTargetBlocks = 132 * 4;
    const int by_fill = static_cast<int>((kTargetBlocks + pairs - 1) / pairs);
    uniform_splits = std::max(1, std::min(by_fill, by_len));
  }
  if (args.decode_split_count > 0) uniform_splits = std::min(args.decode_split_count, by_len);
  const bool by_step_work = args.decode_split_plan == DecodeSplitPlan::by_step_work ||
                            (args.decode_split_plan == DecodeSplitPlan::adaptive && step.uneven_split_rows);
  if (!by_step_work)
    return {uniform_splits, min_split_tokens, tile_keys, head_chunks, kernel_group, keys_as_rows, 0, 0, uniform_splits};
  // Uneven steps: the step's keys over about four waves of tensor-core blocks
  // (or four CUDA-core blocks per multiprocessor), however they are spread
  // over rows.
  const int target_blocks =
      tensor_cores ? 4 * mma_resident_blocks(args.head_dim, keys_as_rows, args.decode_split_stages, tma) : 132 * 4;
  int by_work = std::max(1, std::min(by_len, (target_blocks + pairs_per_row - 1) / pairs_per_row));
  if (step.total_split_kv_tokens > 0) {
    // An eager step: the longest row's splits under step_split()'s length are
    // all the grid needs (a graph's grid must cover any keys of its bucket).
    const std::int64_t split_tokens =
        std::max<std::int64_t>(min_split_tokens, (step.total_split_kv_tokens * pairs_per_row + target_blocks - 1) /
                                                     target_blocks);
    by_work = std::max(1, std::min(by_work, static_cast<int>((max_kv + split_tokens - 1) / split_tokens)));
  }
  return {std::max(uniform_splits, by_work), min_split_tokens, tile_keys, head_chunks, kernel_group, keys_as_rows,
          target_blocks, pairs_per_row, uniform_splits};
}

template <int D>
void launch_for_dim(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch) {
  const SplitPlan plan = plan_split(step, args);
  SplitParams p{};
  p.q = static_cast<const __nv_bfloat16*>(args.q);
  p.out = static_cast<__nv_bfloat16*>(args.out);
  p.k_cache = static_cast<const __nv_bfloat16*>(args.k_cache);
  p.v_cache = static_cast<const __nv_bfloat16*>(args.v_cache);
  const std::int64_t parts =
      static_cast<std::int64_t>(step.num_split_rows) * args.num_q_heads * plan.max_splits;
  p.ws_acc = static_cast<float*>(args.workspace);
  p.ws_ml = p.ws_acc + parts * D;
  p.num_q_heads = args.num_q_heads;
  p.num_kv_heads = args.num_kv_heads;
  p.block_size = args.block_size_tokens;
  p.block_shift = -1;
  for (int shift = 0; shift < 31; ++shift)
    if ((1 << shift) == p.block_size) p.block_shift = shift;
  p.head_chunks = plan.head_chunks;
  p.max_splits = plan.max_splits;
  p.min_split_tokens = plan.min_split_tokens;
  p.split_align = plan.split_align;
  p.target_blocks = plan.target_blocks;
  p.pairs_per_row = plan.pairs_per_row;
  p.uniform_max_splits = plan.uniform_max_splits;
  p.scale_log2 = args.scale * kLog2e;
  const dim3 grid(plan.max_splits, args.num_kv_heads * plan.head_chunks, step.num_split_rows);
  // The split kernels merge their own splits where the caller gave counters
  // enough and the rows have few splits (the last block's merge is serial
  // over them); long rows keep the combine kernel, whose blocks spread it.
  const bool fused_merge = args.split_arrivals != nullptr && plan.max_splits > 1 &&
                           plan.max_splits <= kFusedMergeMaxSplits &&
                           static_cast<std::int64_t>(grid.y) * grid.z <= args.split_arrivals_capacity;
  p.arrivals = fused_merge ? args.split_arrivals : nullptr;
  // Work stealing's counters after the arrival counters, in the same
  // buffer, only where the TMA keys-as-rows kernel runs (the one that claims).
  const std::int64_t counters = static_cast<std::int64_t>(grid.y) * grid.z;
  p.steal_counters = fused_merge && args.decode_split_loads == DecodeSplitLoads::tma_steal && plan.keys_as_rows &&
                             split_tma_loads_apply(args) && 2 * counters <= args.split_arrivals_capacity
                         ? args.split_arrivals + counters
                         : nullptr;
  p.timeline = g_timeline;
  p.timeline_blocks = g_timeline_blocks;
  if (plan.keys_as_rows) {
    if constexpr (D == 64 || D == 128) {
      if (split_tma_loads_apply(args)) {
        const CUtensorMap k_map = kv_cache_tensor_map(args.k_cache, args);
        const CUtensorMap v_map = kv_cache_tensor_map(args.v_cache, args);
        if (args.decode_split_stages == 3)
          launch_split_mma<D, true, 3, true>(grid, launch, step, p, k_map, v_map);
        else
          launch_split_mma<D, true, kMmaStages, true>(grid, launch, step, p, k_map, v_map);
      } else if (args.decode_split_stages == 3)
        launch_split_mma<D, true, 3>(grid, launch, step, p);
      else
        launch_split_mma<D, true, kMmaStages>(grid, launch, step, p);
    }
  } else {
    switch (plan.group) {
      case 16:
        if constexpr (D == 64 || D == 128) launch_split_mma<D, false, kMmaStages>(grid, launch, step, p);
        break;
      case 1: launch_split<D, 1>(grid, launch, step, p); break;
      case 2: launch_split<D, 2>(grid, launch, step, p); break;
      case 4: launch_split<D, 4>(grid, launch, step, p); break;
      default: launch_split<D, 8>(grid, launch, step, p); break;
    }
  }
  SLUICE_CUDA_CHECK_LAUNCH();
  if (plan.max_splits > 1 && !fused_merge) {
    launch_kernel(combine_kernel<D>, dim3(step.num_split_rows, args.num_q_heads),
                  dim3(D * combine_parts<D>()), plan.max_splits * sizeof(float), launch, step, p);
    SLUICE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

bool split_tma_loads_apply(const AttentionArgs& args) {
  const std::int32_t block = args.block_size_tokens;
  const auto aligned = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  // Slots fit the boxes' int32 coordinate; a 16-key box never crosses a page.
  return (args.decode_split_loads == DecodeSplitLoads::tma || args.decode_split_loads == DecodeSplitLoads::tma_steal) &&
         runs_keys_as_rows(args) && block >= kTmaBoxKeys &&
         (block & (block - 1)) == 0 && args.kv_cache_slots > 0 && args.kv_cache_slots <= INT32_MAX &&
         aligned(args.k_cache) && aligned(args.v_cache);
}

void set_decode_split_timeline(std::uint64_t* stamps, std::int64_t blocks) {
  g_timeline = blocks > 0 ? stamps : nullptr;
  g_timeline_blocks = g_timeline != nullptr ? blocks : 0;
}

bool split_kernel_supports(std::int32_t head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

std::int64_t split_workspace_bytes(const StepDeviceView& step, const AttentionArgs& args) {
  const SplitPlan plan = plan_split(step, args);
  const std::int64_t parts =
      static_cast<std::int64_t>(step.num_split_rows) * args.num_q_heads * plan.max_splits;
  return parts * (args.head_dim + 2) * static_cast<std::int64_t>(sizeof(float));
}

void launch_attention_split(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch) {
  if (step.num_split_rows == 0) return;
  switch (args.head_dim) {
    case 16: launch_for_dim<16>(step, args, launch); break;
    case 32: launch_for_dim<32>(step, args, launch); break;
    case 64: launch_for_dim<64>(step, args, launch); break;
    case 128: launch_for_dim<128>(step, args, launch); break;
    case 256: launch_for_dim<256>(step, args, launch); break;
    default: SLUICE_CHECK_MSG(false, "split attention: unsupported head_dim");
  }
}

}  // namespace sluice::cuda
