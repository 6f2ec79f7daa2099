// DeepSeekMoE routing on the device: one block a row, the whole row of expert
// scores in shared memory. Every ranking orders by value, larger first, ties
// to the lower index, as the CPU reference's top_k does, so the same logits
// choose the same experts (up to expf's last-bit differences from the host's
// std::exp, which only matter for values within an ulp of each other).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/moe_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxChosen = 64;

// A candidate of a ranking; index INT_MAX with value -inf is "none".
struct Ranked {
  float value;
  int index;
};

__device__ __forceinline__ bool ranks_before(Ranked a, Ranked b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

__device__ __forceinline__ Ranked warp_first(Ranked r) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Ranked other{__shfl_xor_sync(0xffffffffu, r.value, o), __shfl_xor_sync(0xffffffffu, r.index, o)};
    if (ranks_before(other, r)) r = other;
  }
  return r;
}

// The first-ranked candidate over the block; every thread gets it.
__device__ Ranked block_first(Ranked r, Ranked* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  r = warp_first(r);
  __syncthreads();
  if (lane == 0) scratch[warp] = r;
  __syncthreads();
  r = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : Ranked{-INFINITY, INT_MAX};
  return warp_first(r);
}

__global__ void __launch_bounds__(kThreads) moe_route_kernel(MoeRouteArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float scores[kMoeMaxExperts];
  __shared__ float choice[kMoeMaxExperts];
  __shared__ float group_scores[kMoeMaxExperts];
  __shared__ unsigned char group_kept[kMoeMaxExperts];
  __shared__ unsigned char taken[kMoeMaxExperts];
  __shared__ int chosen[kMaxChosen];
  __shared__ Ranked scratch[32];
  const int row = blockIdx.x, tid = threadIdx.x;
  const int num_experts = a.num_experts, group_size = a.num_experts / a.num_groups;
  const float* logits = a.logits + static_cast<std::int64_t>(row) * num_experts;
  for (int e = tid; e < num_experts; e += blockDim.x) {
    const float s = 1.0f / (1.0f + expf(-logits[e]));
    scores[e] = s;
    choice[e] = s + load_f(a.bias, a.bias_dt, e);
    taken[e] = 0;
  }
  __syncthreads();
  // A group's score: the sum of its two best choices.
  for (int g = tid; g < a.num_groups; g += blockDim.x) {
    const float* group = choice + g * group_size;
    Ranked best{group[0], 0}, second{-INFINITY, INT_MAX};
    for (int i = 1; i < group_size; ++i) {
      const Ranked c{group[i], i};
      if (ranks_before(c, best)) {
        second = best;
        best = c;
      } else if (ranks_before(c, second)) {
        second = c;
      }
    }
    group_scores[g] = best.value + second.value;
    group_kept[g] = 0;
  }
  __syncthreads();
  if (tid == 0) {
    for (int s = 0; s < a.num_groups_selected; ++s) {
      Ranked best{-INFINITY, INT_MAX};
      for (int g = 0; g < a.num_groups; ++g) {
        const Ranked c{group_scores[g], g};
        if (!group_kept[g] && ranks_before(c, best)) best = c;
      }
      group_kept[best.index] = 1;
    }
  }
  __syncthreads();
  for (int e = tid; e < num_experts; e += blockDim.x)
    if (!group_kept[e / group_size]) choice[e] = 0.0f;
  __syncthreads();
  for (int i = 0; i < a.k; ++i) {
    Ranked mine{-INFINITY, INT_MAX};
    for (int e = tid; e < num_experts; e += blockDim.x) {
      const Ranked c{choice[e], e};
      if (!taken[e] && ranks_before(c, mine)) mine = c;
    }
    const Ranked first = block_first(mine, scratch);
    if (tid == 0) {
      chosen[i] = first.index;
      taken[first.index] = 1;
    }
    __syncthreads();
  }
  if (tid != 0) return;
  float total = 0.0f;
  for (int i = 0; i < a.k; ++i) total += scores[chosen[i]];
  for (int i = 0; i < a.k; ++i) {
    float weight = scores[chosen[i]];
    if (a.normalize) weight /= total + 1e-20f;
    a.expert_ids[static_cast<std::int64_t>(row) * a.k + i] = chosen[i];
    a.expert_weights[static_cast<std::int64_t>(row) * a.k + i] = weight * a.scale;
  }
}

}  // namespace

void launch_moe_route(const MoeRouteArgs& args, const Launch& launch) {
  SLUICE_CHECK(args.num_experts > 0 && args.num_experts <= kMoeMaxExperts);
  SLUICE_CHECK(args.k > 0 && args.k <= kMaxChosen && args.k <= args.num_experts);
  SLUICE_CHECK(args.num_groups > 0 && args.num_experts % args.num_groups == 0);
  SLUICE_CHECK(args.num_experts / args.num_groups >= 2);
  SLUICE_CHECK(args.num_groups_selected > 0 && args.num_groups_selected <= args.num_groups);
  if (args.rows == 0) return;
  launch_kernel(moe_route_kernel, dim3(static_cast<unsigned>(args.rows)), dim3(kThreads), 0, launch, args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
