// The compressors' share of a step (deepseek_v4_kernels.h, V4CompressArgs):
// the items' starting states copied out of the blocks, then one block per
// item, a thread per channel pair. Each channel folds its
// tokens into the entry's online-softmax state one after another, in token
// order (model/deepseek_v4_pool_fold.h's operations); an emitted entry is
// the pool, then its RMSNorm (a block sum) with its weight, then the rope of
// the trailing rope_dim at the window's first position. The pairs of the rope
// are the thread's own two channels.
#include <cuda_runtime.h>

#include <cmath>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPairsPerThread = 4;  // dim <= 2 * 256 * 4 = 2048

// The item's entry state [3][dim] in the block that holds `position`.
__device__ __forceinline__ float* state_at(const V4CompressArgs& a, int item, std::int64_t position) {
  const std::int64_t block_index = position / a.blocks.block_size;
  if (position < 0 || block_index >= a.tables.table_len[item]) __trap();
  const std::int32_t block = a.tables.block_ids[a.tables.table_begin[item] + block_index];
  if (block < 0 || block >= a.blocks.num_blocks) __trap();
  return a.blocks.data + static_cast<std::int64_t>(block) * a.blocks.floats_per_block + a.state_offset +
         static_cast<std::int64_t>(a.entry[item] % a.slots) * 3 * a.dim;
}

// The states the items start from, copied out first: an item may store into
// the slot another item of the same step starts from (an entry that closes
// and the one that opens after it in its slot, in one block).
__global__ void __launch_bounds__(kThreads) v4_compress_start_states_kernel(V4CompressArgs a) {
  const int item = blockIdx.x;
  if ((a.flags[item] & kV4CompressRead) == 0) return;
  const float* from = state_at(a, item, static_cast<std::int64_t>(a.first_token[item]) - 1);
  float* to = a.start_states + static_cast<std::int64_t>(item) * 3 * a.dim;
  for (int i = threadIdx.x; i < 3 * a.dim; i += kThreads) to[i] = from[i];
}

__global__ void __launch_bounds__(kThreads) v4_compress_kernel(V4CompressArgs a) {
  __shared__ float scratch[32];
  const int item = blockIdx.x;
  const bool overlap = a.width == 2 * a.dim;
  const int entry = a.entry[item], flags = a.flags[item];
  const std::int64_t first_token = a.first_token[item], first_row = a.first_row[item];
  const int count = a.count[item];
  const float* before =
      (flags & kV4CompressRead) != 0 ? a.start_states + static_cast<std::int64_t>(item) * 3 * a.dim : nullptr;
  float* after = (flags & kV4CompressStore) != 0 ? state_at(a, item, first_token + count - 1) : nullptr;
  float pooled[2 * kMaxPairsPerThread];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPairsPerThread; ++i) {
    const int c0 = 2 * (threadIdx.x + i * kThreads);
    for (int half = 0; half < 2; ++half) {
      const int c = c0 + half;
      float value = 0.0f;
      if (c < a.dim) {
        float m = -INFINITY, s = 0.0f, acc = 0.0f;
        if (before != nullptr) {
          m = before[c];
          s = before[a.dim + c];
          acc = before[2 * a.dim + c];
        }
        for (int k = 0; k < count; ++k) {
          const std::int64_t t = first_token + k, row = first_row + k;
          const int column = overlap && t / a.rate == entry ? a.dim : 0;
          const float g = a.gate[row * a.width + column + c] + a.ape[(t % a.rate) * a.width + column + c];
          if (g == -INFINITY) continue;
          const float m_new = fmaxf(m, g);
          const float scale = expf(m - m_new), weight = expf(g - m_new);
          s = s * scale + weight;
          acc = acc * scale + a.kv[row * a.width + column + c] * weight;
          m = m_new;
        }
        if (after != nullptr) {
          after[c] = m;
          after[a.dim + c] = s;
          after[2 * a.dim + c] = acc;
        }
        value = s > 0.0f ? acc / s : 0.0f;
      }
      pooled[2 * i + half] = value;
      sum_sq = fmaf(value, value, sum_sq);
    }
  }
  if ((flags & kV4CompressEmit) == 0) return;  // uniform across the block
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(a.dim) + a.eps);
  const int rope_begin = a.dim - a.rope.rope_dim;
  const float position = static_cast<float>(static_cast<std::int64_t>(entry) * a.rate);
  const std::int64_t out_row = a.emit_row[item];
#pragma unroll
  for (int i = 0; i < kMaxPairsPerThread; ++i) {
    const int c = 2 * (threadIdx.x + i * kThreads);
    if (c >= a.dim) continue;
    float even = pooled[2 * i] * inv_rms * a.norm[c], odd = pooled[2 * i + 1] * inv_rms * a.norm[c + 1];
    if (a.rope.inv_freq != nullptr && c >= rope_begin) {
      const float angle = a.rope.inv_freq[(c - rope_begin) / 2] * position;
      const float cs = cosf(angle) * a.rope.cos_sin_scale, sn = sinf(angle) * a.rope.cos_sin_scale;
      const float e = even * cs - odd * sn, o = odd * cs + even * sn;
      even = e;
      odd = o;
    }
    const std::int64_t base = out_row * a.dim + c;
    store_f(a.out, a.out_dt, base, even);
    store_f(a.out, a.out_dt, base + 1, odd);
  }
}

}  // namespace

void launch_v4_compress(const V4CompressArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.dim > 0 && args.dim % 2 == 0 && args.dim <= 2 * kThreads * kMaxPairsPerThread);
  SLUICE_CHECK(args.width == args.dim || args.width == 2 * args.dim);
  SLUICE_CHECK(args.rate > 0 && args.slots == (args.width == args.dim ? 1 : 2));
  SLUICE_CHECK(args.kv != nullptr && args.gate != nullptr && args.ape != nullptr && args.norm != nullptr &&
               args.entry != nullptr && args.first_row != nullptr && args.first_token != nullptr &&
               args.count != nullptr && args.flags != nullptr && args.emit_row != nullptr);
  SLUICE_CHECK(args.blocks.data != nullptr && args.blocks.block_size > 0 && args.blocks.num_blocks > 0 &&
               args.state_offset >= 0 && args.state_offset + 3LL * args.slots * args.dim <= args.blocks.floats_per_block);
  SLUICE_CHECK(args.tables.block_ids != nullptr && args.tables.table_begin != nullptr &&
               args.tables.table_len != nullptr);
  if (args.rope.inv_freq != nullptr)
    SLUICE_CHECK(args.rope.rope_dim > 0 && args.rope.rope_dim % 2 == 0 && args.rope.rope_dim <= args.dim);
  SLUICE_CHECK(args.start_states != nullptr);
  if (args.items == 0) return;
  v4_compress_start_states_kernel<<<static_cast<unsigned>(args.items), kThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
  v4_compress_kernel<<<static_cast<unsigned>(args.items), kThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
