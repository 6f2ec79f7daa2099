// DeepSeekMoE routing on the device: one warp a row, the row's expert
// scores in the warp's shared memory, every ranking a warp-wide reduction
// (one block of 256 threads a row, each ranking a block-wide one, took ~56 us
// for 4,096 rows: S35-7). Every ranking orders by value, larger first, ties
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

constexpr int kRowsPerBlock = 4;  // a warp a row
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

// A warp's share of the block's shared memory: the row's scores and choices
// (score + bias, zero outside the kept groups), the group scores, the chosen
// experts and which groups are kept.
struct RouteRow {
  float* scores;
  float* choice;
  float* group_scores;
  int* chosen;
  unsigned char* group_kept;
};
constexpr int route_row_bytes(int num_experts, int num_groups) {
  return ((4 * (2 * num_experts + num_groups + kMaxChosen) + num_groups) + 15) / 16 * 16;
}
__device__ __forceinline__ RouteRow route_row(unsigned char* base, int num_experts, int num_groups) {
  auto* scores = reinterpret_cast<float*>(base);
  float* choice = scores + num_experts;
  float* group_scores = choice + num_experts;
  auto* chosen = reinterpret_cast<int*>(group_scores + num_groups);
  return {scores, choice, group_scores, chosen, reinterpret_cast<unsigned char*>(chosen + kMaxChosen)};
}

__global__ void __launch_bounds__(kRowsPerBlock * 32) moe_route_kernel(MoeRouteArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ __align__(16) unsigned char route_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row = static_cast<int>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= a.rows) return;  // no block-wide barrier below
  const int num_experts = a.num_experts, num_groups = a.num_groups, group_size = num_experts / num_groups;
  const RouteRow r = route_row(route_smem + warp * route_row_bytes(num_experts, num_groups), num_experts, num_groups);
  const float* logits = a.logits + static_cast<std::int64_t>(row) * num_experts;
  for (int e = lane; e < num_experts; e += 32) {
    const float s = 1.0f / (1.0f + expf(-logits[e]));
    r.scores[e] = s;
    r.choice[e] = s + load_f(a.bias, a.bias_dt, e);
  }
  __syncwarp();
  // A group's score: the sum of its two best choices.
  for (int g = lane; g < num_groups; g += 32) {
    const float* group = r.choice + g * group_size;
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
    r.group_scores[g] = best.value + second.value;
    r.group_kept[g] = 0;
  }
  __syncwarp();
  for (int s = 0; s < a.num_groups_selected; ++s) {
    Ranked best{-INFINITY, INT_MAX};
    for (int g = lane; g < num_groups; g += 32) {
      const Ranked c{r.group_scores[g], g};
      if (!r.group_kept[g] && ranks_before(c, best)) best = c;
    }
    best = warp_first(best);
    __syncwarp();  // every lane has read group_kept
    // NaN scores rank before nothing: none kept this round.
    if (lane == 0 && best.index < num_groups) r.group_kept[best.index] = 1;
    __syncwarp();
  }
  for (int e = lane; e < num_experts; e += 32)
    if (!r.group_kept[e / group_size]) r.choice[e] = 0.0f;
  __syncwarp();
  // The top k: lane l holds experts l + 32 j; bit j of `taken` marks one chosen.
  std::uint32_t taken = 0;
  for (int i = 0; i < a.k; ++i) {
    Ranked mine{-INFINITY, INT_MAX};
    for (int j = 0, e = lane; e < num_experts; ++j, e += 32) {
      const Ranked c{r.choice[e], e};
      if (!((taken >> j) & 1u) && ranks_before(c, mine)) mine = c;
    }
    const Ranked first = warp_first(mine);
    const int expert = first.index < num_experts ? first.index : 0;  // NaN choices: expert 0, in bounds
    if ((expert & 31) == lane) taken |= 1u << (expert >> 5);
    if (lane == 0) r.chosen[i] = expert;
  }
  __syncwarp();
  // The weights' sum in the order of the choices, one lane, as the CPU reference adds them.
  float total = 0.0f;
  if (lane == 0)
    for (int i = 0; i < a.k; ++i) total += r.scores[r.chosen[i]];
  total = __shfl_sync(0xffffffffu, total, 0);
  for (int i = lane; i < a.k; i += 32) {
    float weight = r.scores[r.chosen[i]];
    if (a.normalize) weight /= total + 1e-20f;
    a.expert_ids[static_cast<std::int64_t>(row) * a.k + i] = r.chosen[i];
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
  const int smem = kRowsPerBlock * route_row_bytes(args.num_experts, args.num_groups);
  static_assert(kRowsPerBlock * route_row_bytes(kMoeMaxExperts, kMoeMaxExperts / 2) <= 48 * 1024,
                "the routing's shared memory within the default limit");
  launch_kernel(moe_route_kernel, dim3(static_cast<unsigned>((args.rows + kRowsPerBlock - 1) / kRowsPerBlock)),
                dim3(kRowsPerBlock * 32), static_cast<std::size_t>(smem), launch, args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
