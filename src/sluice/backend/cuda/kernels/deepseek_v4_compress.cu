// The compressors' entries (deepseek_v4_kernels.h): one block per entry, a
// thread per channel pair. Each channel's softmax over its slots is two
// passes over the window's pending rows (max, then the weighted sums), as the
// reference's softmax_pool; then the entry's RMSNorm (a block sum) with its
// weight, then the rope of the trailing rope_dim at the window's first
// position. The pairs of the rope are the thread's own two channels.
#include <cuda_runtime.h>

#include <cmath>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPairsPerThread = 4;  // dim <= 2 * 256 * 4 = 2048

// The slot's row and column offset: overlap windows take slots [0, rate) from
// the previous window's first half, [rate, 2 * rate) from their own second half.
struct Slot {
  std::int64_t row;
  int column;
};

__device__ __forceinline__ bool slot_of(const V4CompressArgs& a, int entry, int s, bool overlap, Slot* out) {
  if (overlap) {
    if (s < a.rate) {
      const int prev = a.prev_window_row[entry];
      if (prev < 0) return false;
      *out = Slot{static_cast<std::int64_t>(prev) + s, 0};
      return true;
    }
    *out = Slot{static_cast<std::int64_t>(a.window_row[entry]) + s - a.rate, a.dim};
    return true;
  }
  *out = Slot{static_cast<std::int64_t>(a.window_row[entry]) + s, 0};
  return true;
}

__global__ void __launch_bounds__(kThreads) v4_compress_kernel(V4CompressArgs a) {
  __shared__ float scratch[32];
  const int entry = blockIdx.x;
  const bool overlap = a.width == 2 * a.dim;
  const int slots = overlap ? 2 * a.rate : a.rate;
  float pooled[2 * kMaxPairsPerThread];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPairsPerThread; ++i) {
    const int c0 = 2 * (threadIdx.x + i * kThreads);
    for (int half = 0; half < 2; ++half) {
      const int c = c0 + half;
      float value = 0.0f;
      if (c < a.dim) {
        float gate_max = -INFINITY;
        for (int s = 0; s < slots; ++s) {
          Slot slot;
          if (!slot_of(a, entry, s, overlap, &slot)) continue;
          const int slot_in_window = s % a.rate;
          const float g = a.gate[slot.row * a.width + slot.column + c] + a.ape[slot_in_window * a.width + slot.column + c];
          gate_max = fmaxf(gate_max, g);
        }
        float weight_sum = 0.0f, sum = 0.0f;
        for (int s = 0; s < slots; ++s) {
          Slot slot;
          if (!slot_of(a, entry, s, overlap, &slot)) continue;
          const int slot_in_window = s % a.rate;
          const float g = a.gate[slot.row * a.width + slot.column + c] + a.ape[slot_in_window * a.width + slot.column + c];
          const float w = expf(g - gate_max);
          weight_sum += w;
          sum = fmaf(w, a.kv[slot.row * a.width + slot.column + c], sum);
        }
        value = sum / weight_sum;
      }
      pooled[2 * i + half] = value;
      sum_sq = fmaf(value, value, sum_sq);
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(a.dim) + a.eps);
  const int rope_begin = a.dim - a.rope.rope_dim;
  const float position = static_cast<float>(a.position[entry]);
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
    const std::int64_t base = static_cast<std::int64_t>(entry) * a.dim + c;
    store_f(a.out, a.out_dt, base, even);
    store_f(a.out, a.out_dt, base + 1, odd);
  }
}

}  // namespace

void launch_v4_compress(const V4CompressArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.dim > 0 && args.dim % 2 == 0 && args.dim <= 2 * kThreads * kMaxPairsPerThread);
  SLUICE_CHECK(args.width == args.dim || args.width == 2 * args.dim);
  SLUICE_CHECK(args.rate > 0);
  SLUICE_CHECK(args.kv != nullptr && args.gate != nullptr && args.ape != nullptr && args.norm != nullptr &&
               args.window_row != nullptr && args.position != nullptr && args.out != nullptr);
  SLUICE_CHECK(args.width == args.dim || args.prev_window_row != nullptr);
  if (args.rope.inv_freq != nullptr)
    SLUICE_CHECK(args.rope.rope_dim > 0 && args.rope.rope_dim % 2 == 0 && args.rope.rope_dim <= args.dim);
  if (args.entries == 0) return;
  v4_compress_kernel<<<static_cast<unsigned>(args.entries), kThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
