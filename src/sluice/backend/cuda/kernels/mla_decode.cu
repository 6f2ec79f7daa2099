// MLA decode in the absorbed form (DeepSeek-V3): every head of a sequence
// attends over the same paged latent rows [c | k_rope] with the query
// [W_UK_h^T q_nope | q_rope] (the W_UK GEMM runs before, the W_UV GEMM after:
// mla_attention.cpp). This file holds the row bookkeeping (decode list,
// q gather, output scatter), the simple split-K kernel on CUDA cores and the
// combine of the splits; the tensor-core kernels are mla_decode_mma.cu
// (mma.sync) and mla_decode_wgmma.cu (Hopper wgmma).
//
// Split K: a (row, head)'s keys [0, context) are cut into num_splits even
// ranges, each block writes its unnormalised partial output with its running
// max and sum of exp, and the combine kernel merges them. The split count is
// a pure function of the launch shape (the graph bucket's context under CUDA
// graphs); each block derives its range from its row's actual context on the
// device, so a replayed graph is right at every context of its bucket.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mla_common.cuh"
#include "sluice/backend/cuda/kernels/mla_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRankPerLane = kMlaDecodeMaxRank / 32;

// One warp, 32 sequences a round in order: a ballot and a prefix count
// place each decode sequence. (One thread walking the sequences was a chain
// of dependent loads: 6 us at 64 sequences, run S17-mla-2.)
__global__ void decode_list_kernel(StepDeviceView step, std::int32_t* decode_seqs) {
  pdl_launch_dependents();
  pdl_wait();
  const int lane = threadIdx.x;
  int n = 0;
  for (int base = 0; base < step.num_sequences; base += 32) {
    const int s = base + lane;
    const bool decode = s < step.num_sequences && step.seq_num_rows[s] == 1;
    const unsigned mask = __ballot_sync(0xffffffffu, decode);
    if (decode) decode_seqs[n + __popc(mask & ((1u << lane) - 1u))] = s;
    n += __popc(mask);
  }
}

// The 16-byte chunk paths below need every dim a multiple of 8 bf16 and
// 16-byte aligned tensors (DeepSeek-V3's: nope 128, rope 64, rank 512);
// other shapes take the element-by-element kernels.
bool chunks_fit(std::initializer_list<std::int64_t> dims, std::initializer_list<const void*> tensors) {
  for (const std::int64_t d : dims)
    if (d % 8 != 0) return false;
  for (const void* t : tensors)
    if (reinterpret_cast<std::uintptr_t>(t) % 16 != 0) return false;
  return true;
}

// One thread a 16-byte chunk of a decode row's queries: blockIdx.x the row,
// blockIdx.y * kThreads + threadIdx.x the chunk over its heads. (One block a
// (row, head) copying 2-byte elements took 12 us at 64 x 128 heads, S17-mla-2.)
__global__ void __launch_bounds__(kThreads) gather_q_chunks_kernel(StepDeviceView step, MlaDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int qk = a.nope_dim + a.rope_dim, width = a.kv_lora_rank + a.rope_dim;
  const int chunks_per_head = qk / 8;
  const int c = blockIdx.y * kThreads + threadIdx.x;
  if (c >= a.num_heads * chunks_per_head) return;
  const int i = blockIdx.x, h = c / chunks_per_head, d = c % chunks_per_head * 8;
  const int row = step.seq_row_begin[a.decode_seqs[i]];
  const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.q) +
                                                  (static_cast<std::int64_t>(row) * a.num_heads + h) * qk + d);
  const std::int64_t item = static_cast<std::int64_t>(i) * a.num_heads + h;
  auto* dst = d < a.nope_dim ? static_cast<__nv_bfloat16*>(a.q_nope) + item * a.nope_dim + d
                             : static_cast<__nv_bfloat16*>(a.q_latent) + item * width + a.kv_lora_rank + d - a.nope_dim;
  *reinterpret_cast<uint4*>(dst) = v;
}

// One block a (decode row, head).
__global__ void __launch_bounds__(kThreads) gather_q_kernel(StepDeviceView step, MlaDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int i = blockIdx.x, h = blockIdx.y;
  const int row = step.seq_row_begin[a.decode_seqs[i]];
  const int qk = a.nope_dim + a.rope_dim, width = a.kv_lora_rank + a.rope_dim;
  const auto* src = static_cast<const __nv_bfloat16*>(a.q) + (static_cast<std::int64_t>(row) * a.num_heads + h) * qk;
  const std::int64_t item = static_cast<std::int64_t>(i) * a.num_heads + h;
  auto* nope = static_cast<__nv_bfloat16*>(a.q_nope) + item * a.nope_dim;
  auto* latent = static_cast<__nv_bfloat16*>(a.q_latent) + item * width + a.kv_lora_rank;
  for (int d = threadIdx.x; d < qk; d += kThreads) {
    if (d < a.nope_dim)
      nope[d] = src[d];
    else
      latent[d - a.nope_dim] = src[d];
  }
}

// One block a (decode row, head, split); each warp takes every kWarps-th key
// of the split's range with an online softmax, and the warps merge through
// shared memory. Lanes hold dims lane + 32 j of the query (shared memory) and
// of the output (registers). Every head reads the latent rows again (from L2
// after the first): the fallback, not the fast path.
__global__ void __launch_bounds__(kThreads) decode_simple_kernel(StepDeviceView step, MlaDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float s_q[kMlaDecodeMaxWidth];
  __shared__ float s_out[kWarps][kMlaDecodeMaxRank];
  __shared__ float s_max[kWarps], s_sum[kWarps];
  const int i = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seq = a.decode_seqs[i];
  const int width = a.cache.width, rank = a.kv_lora_rank;
  const std::int64_t item = static_cast<std::int64_t>(i) * a.num_heads + h;
  const auto* q = static_cast<const __nv_bfloat16*>(a.q_latent) + item * width;
  for (int d = threadIdx.x; d < width; d += kThreads) s_q[d] = __bfloat162float(q[d]);
  __syncthreads();

  const KeyRange range = decode_split_range(step.seq_num_computed[seq] + 1, a.num_splits, split, 1);
  const std::int32_t* table = step.block_tables + step.seq_block_offset[seq];
  const auto* cache = static_cast<const __nv_bfloat16*>(a.cache.data);
  OnlineSoftmax softmax;
  float acc[kRankPerLane];
#pragma unroll
  for (int j = 0; j < kRankPerLane; ++j) acc[j] = 0.0f;
  for (int key = range.begin + warp; key < range.end; key += kWarps) {
    const __nv_bfloat16* c =
        cache + (static_cast<std::int64_t>(table[key / a.cache.block_size]) * a.cache.block_size +
                 key % a.cache.block_size) * width;
    float dot = 0.0f;
    for (int d = lane; d < width; d += 32) dot += s_q[d] * __bfloat162float(c[d]);
    const OnlineSoftmax::Step step = softmax.add(warp_sum(dot) * a.scale);
#pragma unroll
    for (int j = 0; j < kRankPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < rank) acc[j] = acc[j] * step.correction + step.weight * __bfloat162float(c[d]);
    }
  }
#pragma unroll
  for (int j = 0; j < kRankPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < rank) s_out[warp][d] = acc[j];
  }
  if (lane == 0) {
    s_max[warp] = softmax.max;
    s_sum[warp] = softmax.sum;
  }
  __syncthreads();
  float block_max = -INFINITY;
  for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, s_max[w]);
  float weight[kWarps];
  float block_sum = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = s_max[w] == -INFINITY ? 0.0f : __expf(s_max[w] - block_max);
    block_sum += weight[w] * s_sum[w];
  }
  const std::int64_t part = item * a.num_splits + split;
  for (int d = threadIdx.x; d < rank; d += kThreads) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += weight[w] * s_out[w][d];
    a.partial_out[part * rank + d] = o;
  }
  if (threadIdx.x == 0) {
    a.partial_stats[2 * part] = block_max;
    a.partial_stats[2 * part + 1] = block_sum;
  }
}

// One block a (decode row, head): o_latent = sum_s w_s o_s / sum_s w_s l_s,
// w_s = exp(m_s - max m). An empty split has m = -inf and weighs 0.
__global__ void __launch_bounds__(kThreads) combine_kernel(MlaDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * a.num_heads + blockIdx.y;
  const int rank = a.kv_lora_rank;
  const float* stats = a.partial_stats + 2 * item * a.num_splits;
  float top = -INFINITY;
  for (int s = 0; s < a.num_splits; ++s) top = fmaxf(top, stats[2 * s]);
  float total = 0.0f;
  for (int s = 0; s < a.num_splits; ++s)
    if (stats[2 * s] != -INFINITY) total += __expf(stats[2 * s] - top) * stats[2 * s + 1];
  const float inv_total = 1.0f / total;
  const float* partial = a.partial_out + item * a.num_splits * rank;
  auto* dst = static_cast<__nv_bfloat16*>(a.o_latent) + item * rank;
  for (int d = threadIdx.x; d < rank; d += kThreads) {
    float o = 0.0f;
    for (int s = 0; s < a.num_splits; ++s)
      if (stats[2 * s] != -INFINITY) o += __expf(stats[2 * s] - top) * partial[static_cast<std::int64_t>(s) * rank + d];
    dst[d] = __float2bfloat16(o * inv_total);
  }
}

// One thread a 16-byte chunk: blockIdx.x the decode row, blockIdx.y *
// kThreads + threadIdx.x the chunk. (One block a row copying 2-byte elements
// took 50 us at 64 rows x 128 heads x 128, run S17-mla-2: the op's largest
// fixed cost.)
__global__ void __launch_bounds__(kThreads) scatter_out_chunks_kernel(StepDeviceView step, MlaDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t cols = static_cast<std::int64_t>(a.num_heads) * a.v_dim;
  const std::int64_t d = (static_cast<std::int64_t>(blockIdx.y) * kThreads + threadIdx.x) * 8;
  if (d >= cols) return;
  const int i = blockIdx.x;
  const int row = step.seq_row_begin[a.decode_seqs[i]];
  *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.out) + row * cols + d) =
      *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.o_decode) + i * cols + d);
}

// One block a decode row.
__global__ void __launch_bounds__(kThreads) scatter_out_kernel(StepDeviceView step, MlaDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int i = blockIdx.x;
  const int row = step.seq_row_begin[a.decode_seqs[i]];
  const std::int64_t cols = static_cast<std::int64_t>(a.num_heads) * a.v_dim;
  const auto* src = static_cast<const __nv_bfloat16*>(a.o_decode) + i * cols;
  auto* dst = static_cast<__nv_bfloat16*>(a.out) + row * cols;
  for (std::int64_t d = threadIdx.x; d < cols; d += kThreads) dst[d] = src[d];
}

}  // namespace

bool mla_decode_mma_supports(std::int32_t kv_lora_rank, std::int32_t rope_dim) {
  return kv_lora_rank == 512 && rope_dim == 64;
}

bool mla_decode_wgmma_era(MlaKernels kernels) {
  return kernels == MlaKernels::wgmma || mla_decode_16_heads_kernels(kernels);
}

namespace {

// The wgmma kernel runs one block an SM (225 KB of shared memory) over
// 64-key tiles: the split count s that minimises waves(s) x (tiles a split
// + a fixed cost), waves(s) = ceil(blocks of one split x s / SMs). The fixed
// cost, in tiles, is a block's start (its 72 KB of queries, the ring's first
// tile) and its 128 KB of f32 partials written and combined. Batch 64 x 8k
// on 132 SMs: 1 split (128 blocks, one wave of 128 tiles); batch 1 x 32k: 64
// splits (128 blocks of 8 tiles).
// The 16-head kernel (one block an SM too, 32-key tiles) by the same cost,
// its fixed cost the same 128 keys: batch 64 x 8k, 2 splits (128 blocks).
std::int32_t wgmma_decode_splits(std::int32_t blocks_per_split, std::int32_t max_context_tokens,
                                 std::int32_t num_sms, std::int32_t max_splits, std::int64_t tile_keys = 64) {
  const std::int64_t fixed_cost_tiles = 128 / tile_keys;
  const std::int64_t tiles = std::max<std::int64_t>(1, (max_context_tokens + tile_keys - 1) / tile_keys);
  std::int32_t best = 1;
  std::int64_t best_cost = -1;
  for (std::int32_t s = 1; s <= max_splits && s <= tiles; ++s) {
    const std::int64_t waves = (static_cast<std::int64_t>(blocks_per_split) * s + num_sms - 1) / num_sms;
    const std::int64_t cost = waves * ((tiles + s - 1) / s + fixed_cost_tiles);
    if (best_cost < 0 || cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace

std::int32_t mla_decode_splits(std::int32_t num_decode, std::int32_t num_heads, std::int32_t max_context_tokens,
                               std::int32_t num_sms, MlaKernels kernels) {
  // Blocks of one split: the simple kernel runs one a (row, head), the
  // tensor-core kernels one a (row, 64 heads). Enough splits for ~2 waves of
  // the SMs, but at least kMinKeysPerSplit keys each so the combine stays
  // small; the wgmma kernels by their own cost (above): the keys-as-M kernel
  // is one block a (row, split) at <= 16 heads, as the others' one 64-head group.
  constexpr std::int32_t kMinKeysPerSplit = 256;
  constexpr std::int32_t kMaxSplits = 64;
  const std::int32_t head_blocks = kernels == MlaKernels::simple ? num_heads : (num_heads + 63) / 64;
  const std::int32_t blocks_per_split = std::max(1, num_decode * head_blocks);
  // The 16-head kernels' tiles are 32 keys; the pairs form runs two blocks an SM.
  if (mla_decode_16_heads_kernels(kernels) && num_heads <= kMla16HeadsMaxHeads)
    return wgmma_decode_splits(blocks_per_split, max_context_tokens,
                               num_sms * mla_decode_16_heads_blocks_per_sm(kernels), kMaxSplits, /*tile_keys=*/32);
  if (mla_decode_wgmma_era(kernels))
    return wgmma_decode_splits(blocks_per_split, max_context_tokens, num_sms, kMaxSplits);
  const std::int32_t for_waves = (2 * num_sms + blocks_per_split - 1) / blocks_per_split;
  const std::int32_t by_length = (max_context_tokens + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  return std::clamp(std::min(for_waves, by_length), 1, kMaxSplits);
}

void launch_mla_decode_list(const StepDeviceView& step, std::int32_t* decode_seqs, const Launch& launch) {
  launch_kernel(decode_list_kernel, dim3(1), dim3(32), 0, launch, step, decode_seqs);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_mla_decode_gather_q(const StepDeviceView& step, const MlaDecodeArgs& args, const Launch& launch) {
  if (args.num_decode == 0) return;
  if (chunks_fit({args.nope_dim, args.rope_dim, args.kv_lora_rank}, {args.q, args.q_nope, args.q_latent})) {
    const std::int32_t chunks = args.num_heads * ((args.nope_dim + args.rope_dim) / 8);
    launch_kernel(gather_q_chunks_kernel, dim3(args.num_decode, (chunks + kThreads - 1) / kThreads), dim3(kThreads), 0,
                  launch, step, args);
  } else {
    launch_kernel(gather_q_kernel, dim3(args.num_decode, args.num_heads), dim3(kThreads), 0, launch, step, args);
  }
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_mla_decode_attention(const StepDeviceView& step, const MlaDecodeArgs& args, MlaKernels kernels,
                                 const Launch& launch) {
  if (args.num_decode == 0) return;
  SLUICE_CHECK(args.cache.width <= kMlaDecodeMaxWidth && args.kv_lora_rank <= kMlaDecodeMaxRank);
  const bool latent_dims = mla_decode_mma_supports(args.kv_lora_rank, args.rope_dim);
  // The 16-head sets take wgmma's kernel where their shapes do not fit.
  if (latent_dims && mla_decode_wgmma_era(kernels)) {
    if (mla_decode_16_heads_kernels(kernels) && mla_decode_16_heads_supports(args.num_heads, args.cache.block_size))
      launch_mla_decode_attention_16_heads(step, args, kernels, launch);
    else
      launch_mla_decode_attention_wgmma(step, args, launch);
    if (args.num_splits == 1) return;  // it wrote o_latent itself
  } else if (latent_dims && kernels == MlaKernels::tensor_core) {
    launch_mla_decode_attention_mma(step, args, launch);
  } else {
    launch_kernel(decode_simple_kernel, dim3(args.num_decode, args.num_heads, args.num_splits), dim3(kThreads), 0,
                  launch, step, args);
    SLUICE_CUDA_CHECK_LAUNCH();
  }
  launch_kernel(combine_kernel, dim3(args.num_decode, args.num_heads), dim3(kThreads), 0, launch, args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_mla_decode_scatter_out(const StepDeviceView& step, const MlaDecodeArgs& args, const Launch& launch) {
  if (args.num_decode == 0) return;
  const std::int64_t cols = static_cast<std::int64_t>(args.num_heads) * args.v_dim;
  if (chunks_fit({cols}, {args.o_decode, args.out})) {
    const std::int64_t chunks = cols / 8;
    launch_kernel(scatter_out_chunks_kernel,
                  dim3(args.num_decode, static_cast<unsigned>((chunks + kThreads - 1) / kThreads)), dim3(kThreads), 0,
                  launch, step, args);
  } else {
    launch_kernel(scatter_out_kernel, dim3(args.num_decode), dim3(kThreads), 0, launch, step, args);
  }
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
