// Split-KV paged attention on CUDA cores: one block per (query row, kv head,
// group of up to kGroup query heads, key split). Used for decode rows, where
// the work is reading K and V once: every query head that shares a kv head is
// computed from the same loaded K/V vectors (GQA), and long contexts are split
// across blocks whose partial softmax states a second kernel merges.
//
// Thread layout: a "lane group" of D/kDims lanes holds one key (kDims = 16
// bf16, two 16-byte loads, a lane; 8 for groups of 8 heads, to bound
// registers); a warp holds 32/(D/kDims) keys at a time and kUnroll such sets
// are in flight before the first use. Fewer lanes per key means fewer
// shuffles and fewer redundant exponentials per key, which bound this kernel
// at GQA group sizes >= 4. Softmax runs in base 2 with the scale folded into q.
#include <cuda_bf16.h>

#include <algorithm>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

struct SplitParams {
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  const __nv_bfloat16* k_cache;
  const __nv_bfloat16* v_cache;
  float* ws_acc;  // [num_split_rows, num_q_heads, num_splits, D]
  float* ws_ml;   // [num_split_rows, num_q_heads, num_splits, 2]
  int num_q_heads, num_kv_heads, block_size, split_tokens, num_splits, head_chunks;
  float scale_log2;
};

__device__ __forceinline__ void unpack8(uint4 raw, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

template <int D, int kGroup>
__global__ void __launch_bounds__(kWarps * 32)
    split_kernel(StepDeviceView step, SplitParams p) {
  constexpr int kDims = kGroup >= 8 ? 8 : 16;  // dims a lane holds
  constexpr int kVec = kDims / 8;               // 16-byte loads per lane per row
  constexpr int kUnroll = 4 / kVec;             // keys in flight per lane group
  constexpr int kLanesPerKey = D / kDims;
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kKeysPerIter = kWarps * kKeysPerWarp * kUnroll;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lane_group = lane / kLanesPerKey, sub = lane % kLanesPerKey;

  const int row_index = blockIdx.z;
  const int row = step.split_rows[row_index];
  const int seq = step.row_sequence[row];
  const int kv_len = step.positions[row] + 1;
  const int kv_head = blockIdx.y / p.head_chunks;
  const int group_size = p.num_q_heads / p.num_kv_heads;
  const int head_begin = kv_head * group_size + (blockIdx.y % p.head_chunks) * kGroup;
  const int num_heads_here = min(kGroup, kv_head * group_size + group_size - head_begin);
  const int key_begin = blockIdx.x * p.split_tokens;
  const int key_end = min(key_begin + p.split_tokens, kv_len);
  const std::int32_t* table = step.block_tables + step.seq_block_offset[seq];

  float q[kGroup][kDims];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      float f[8];
      if (g < num_heads_here) {
        unpack8(*reinterpret_cast<const uint4*>(
                    p.q + (static_cast<std::int64_t>(row) * p.num_q_heads + head_begin + g) * D +
                    sub * kDims + v * 8),
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

  const std::int64_t key_stride = static_cast<std::int64_t>(p.num_kv_heads) * D;
  for (int chunk = key_begin; chunk < key_end; chunk += kKeysPerIter) {
    uint4 kraw[kUnroll][kVec], vraw[kUnroll][kVec];
    int key[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      key[u] = chunk + (u * kWarps + warp) * kKeysPerWarp + lane_group;
      if (key[u] < key_end) {
        const std::int64_t slot =
            static_cast<std::int64_t>(table[key[u] / p.block_size]) * p.block_size +
            key[u] % p.block_size;
        const std::int64_t off = slot * key_stride + kv_head * D + sub * kDims;
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          kraw[u][v] = *reinterpret_cast<const uint4*>(p.k_cache + off + v * 8);
          vraw[u][v] = *reinterpret_cast<const uint4*>(p.v_cache + off + v * 8);
        }
      } else {
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          kraw[u][v] = make_uint4(0, 0, 0, 0);
          vraw[u][v] = make_uint4(0, 0, 0, 0);
        }
      }
    }
    float s[kGroup][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[kDims];
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        float f[8];
        unpack8(kraw[u][v], f);
#pragma unroll
        for (int i = 0; i < 8; ++i) kf[v * 8 + i] = f[i];
      }
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kDims; ++i) dot += q[g][i] * kf[i];
#pragma unroll
        for (int o = kLanesPerKey / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        s[g][u] = key[u] < key_end ? dot : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) m_new = fmaxf(m_new, s[g][u]);
      if (m_new == -INFINITY) continue;
      const float correction = exp2f(m[g] - m_new);
      m[g] = m_new;
      l[g] *= correction;
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[g][i] *= correction;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float pr = exp2f(s[g][u] - m_new);
        l[g] += pr;
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          float vf[8];
          unpack8(vraw[u][v], vf);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[g][v * 8 + i] += pr * vf[i];
        }
      }
    }
  }

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

  // Merge the warps through shared memory.
  __shared__ float sm_acc[kWarps][kGroup][D];
  __shared__ float sm_m[kWarps][kGroup], sm_l[kWarps][kGroup];
  if (lane_group == 0) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
#pragma unroll
      for (int i = 0; i < kDims; ++i) sm_acc[warp][g][sub * kDims + i] = acc[g][i];
      if (sub == 0) {
        sm_m[warp][g] = m[g];
        sm_l[warp][g] = l[g];
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kGroup * D; e += kWarps * 32) {
    const int g = e / D, d = e % D;
    if (g >= num_heads_here) continue;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, sm_m[w][g]);
    float l_all = 0.0f, a_all = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float c = m_all == -INFINITY ? 0.0f : exp2f(sm_m[w][g] - m_all);
      l_all += sm_l[w][g] * c;
      a_all += sm_acc[w][g][d] * c;
    }
    const int head = head_begin + g;
    if (p.num_splits == 1) {
      p.out[(static_cast<std::int64_t>(row) * p.num_q_heads + head) * D + d] =
          __float2bfloat16(a_all / l_all);
    } else {
      const std::int64_t part =
          (static_cast<std::int64_t>(row_index) * p.num_q_heads + head) * p.num_splits +
          blockIdx.x;
      p.ws_acc[part * D + d] = a_all;
      if (d == 0) {
        p.ws_ml[part * 2] = m_all;
        p.ws_ml[part * 2 + 1] = l_all;
      }
    }
  }
}

// One block per (row, query head), one thread per dim: merges the splits.
template <int D>
__global__ void combine_kernel(StepDeviceView step, SplitParams p) {
  const int row_index = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  const int row = step.split_rows[row_index];
  const std::int64_t base = (static_cast<std::int64_t>(row_index) * p.num_q_heads + head) *
                            p.num_splits;
  float m_all = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) m_all = fmaxf(m_all, p.ws_ml[(base + s) * 2]);
  float l_all = 0.0f, a_all = 0.0f;
  for (int s = 0; s < p.num_splits; ++s) {
    const float m_s = p.ws_ml[(base + s) * 2];
    if (m_s == -INFINITY) continue;
    const float c = exp2f(m_s - m_all);
    l_all += p.ws_ml[(base + s) * 2 + 1] * c;
    a_all += p.ws_acc[(base + s) * D + d] * c;
  }
  p.out[(static_cast<std::int64_t>(row) * p.num_q_heads + head) * D + d] =
      __float2bfloat16(a_all / l_all);
}

struct SplitPlan {
  int num_splits, split_tokens, head_chunks, group;
};

SplitPlan plan_split(const StepDeviceView& step, const AttentionArgs& args) {
  const int group_size = args.num_q_heads / args.num_kv_heads;
  const int kernel_group = group_size <= 1 ? 1 : group_size <= 2 ? 2 : group_size <= 4 ? 4 : 8;
  const int head_chunks = (group_size + kernel_group - 1) / kernel_group;
  // Enough blocks to fill the GPU about four times over, but no split shorter
  // than 128 keys (below that the merge costs more than it saves).
  constexpr int kTargetBlocks = 132 * 4;
  constexpr int kMinSplitTokens = 128;
  const std::int64_t base = static_cast<std::int64_t>(step.num_split_rows) * args.num_kv_heads *
                            head_chunks;
  const int max_kv = std::max(1, step.max_split_kv_tokens);
  const int by_fill = static_cast<int>((kTargetBlocks + base - 1) / std::max<std::int64_t>(base, 1));
  const int by_len = (max_kv + kMinSplitTokens - 1) / kMinSplitTokens;
  int num_splits = std::max(1, std::min(by_fill, by_len));
  const int split_tokens = (max_kv + num_splits - 1) / num_splits;
  num_splits = (max_kv + split_tokens - 1) / split_tokens;
  return {num_splits, split_tokens, head_chunks, kernel_group};
}

template <int D>
void launch_for_dim(const StepDeviceView& step, const AttentionArgs& args, cudaStream_t stream) {
  const SplitPlan plan = plan_split(step, args);
  SplitParams p{};
  p.q = static_cast<const __nv_bfloat16*>(args.q);
  p.out = static_cast<__nv_bfloat16*>(args.out);
  p.k_cache = static_cast<const __nv_bfloat16*>(args.k_cache);
  p.v_cache = static_cast<const __nv_bfloat16*>(args.v_cache);
  const std::int64_t parts =
      static_cast<std::int64_t>(step.num_split_rows) * args.num_q_heads * plan.num_splits;
  p.ws_acc = static_cast<float*>(args.workspace);
  p.ws_ml = p.ws_acc + parts * D;
  p.num_q_heads = args.num_q_heads;
  p.num_kv_heads = args.num_kv_heads;
  p.block_size = args.block_size_tokens;
  p.split_tokens = plan.split_tokens;
  p.num_splits = plan.num_splits;
  p.head_chunks = plan.head_chunks;
  p.scale_log2 = args.scale * kLog2e;
  const dim3 grid(plan.num_splits, args.num_kv_heads * plan.head_chunks, step.num_split_rows);
  switch (plan.group) {
    case 1: split_kernel<D, 1><<<grid, kWarps * 32, 0, stream>>>(step, p); break;
    case 2: split_kernel<D, 2><<<grid, kWarps * 32, 0, stream>>>(step, p); break;
    case 4: split_kernel<D, 4><<<grid, kWarps * 32, 0, stream>>>(step, p); break;
    default: split_kernel<D, 8><<<grid, kWarps * 32, 0, stream>>>(step, p); break;
  }
  SLUICE_CUDA_CHECK_LAUNCH();
  if (plan.num_splits > 1) {
    combine_kernel<D><<<dim3(step.num_split_rows, args.num_q_heads), D, 0, stream>>>(step, p);
    SLUICE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

bool split_kernel_supports(std::int32_t head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

std::int64_t split_workspace_bytes(const StepDeviceView& step, const AttentionArgs& args) {
  const SplitPlan plan = plan_split(step, args);
  const std::int64_t parts =
      static_cast<std::int64_t>(step.num_split_rows) * args.num_q_heads * plan.num_splits;
  return parts * (args.head_dim + 2) * static_cast<std::int64_t>(sizeof(float));
}

void launch_attention_split(const StepDeviceView& step, const AttentionArgs& args,
                            cudaStream_t stream) {
  if (step.num_split_rows == 0) return;
  switch (args.head_dim) {
    case 16: launch_for_dim<16>(step, args, stream); break;
    case 32: launch_for_dim<32>(step, args, stream); break;
    case 64: launch_for_dim<64>(step, args, stream); break;
    case 128: launch_for_dim<128>(step, args, stream); break;
    case 256: launch_for_dim<256>(step, args, stream); break;
    default: SLUICE_CHECK_MSG(false, "split attention: unsupported head_dim");
  }
}

}  // namespace sluice::cuda
