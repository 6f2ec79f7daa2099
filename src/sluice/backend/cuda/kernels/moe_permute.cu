// The permutation around the grouped expert GEMMs: the plan (pairs sorted by
// expert into slots, cut into GEMM tiles) and the weighted un-permutation
// into the output. The plan runs in one block: it is a histogram, a scan over
// at most kMoeMaxExperts experts and one scatter, microseconds at decode sizes
// and small beside the GEMMs at prefill sizes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/moe_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kPlanThreads = 1024;
constexpr int kCombineThreads = 256;
constexpr int kMaxChoices = 64;

// MoeTileOrder::paired, one thread: experts in order, each one's tiles two by
// two from pair_position[e]; an expert with an odd count keeps its last tile
// back until the next such expert, and the two go in the pair after that
// expert's own pairs (odd_position). A last odd tile left over takes the
// position before num_tiles, its partner num_tiles (-1). So positions
// [0, num_tiles) are every tile once, in pairs (2p, 2p + 1).
__device__ void paired_positions(const int* tile_offsets, int num_experts, int* pair_position, int* odd_position) {
  int position = 0, waiting = -1;  // waiting: the expert whose odd tile has no partner yet
  for (int e = 0; e < num_experts; ++e) {
    const int num_expert_tiles = tile_offsets[e + 1] - tile_offsets[e];
    pair_position[e] = position;
    position += num_expert_tiles & ~1;
    if ((num_expert_tiles & 1) == 0) continue;
    if (waiting < 0) {
      waiting = e;
      continue;
    }
    odd_position[waiting] = position;
    odd_position[e] = position + 1;
    position += 2;
    waiting = -1;
  }
  if (waiting >= 0) odd_position[waiting] = position;
}

__global__ void __launch_bounds__(kPlanThreads) moe_plan_kernel(MoePlanArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ int counts[kMoeMaxExperts];
  __shared__ int cursor[kMoeMaxExperts];
  __shared__ int offsets[kMoeMaxExperts + 1];
  __shared__ int tile_offsets[kMoeMaxExperts + 1];
  // MoeTileOrder::paired: where expert e's first pair and its odd tile go.
  __shared__ int pair_position[kMoeMaxExperts];
  __shared__ int odd_position[kMoeMaxExperts];
  const int tid = threadIdx.x, num_experts = a.num_experts;
  for (int e = tid; e < num_experts; e += blockDim.x) {
    counts[e] = 0;
    cursor[e] = 0;
  }
  __syncthreads();
  for (int p = tid; p < a.num_pairs; p += blockDim.x) atomicAdd(&counts[a.expert_ids[p]], 1);
  __syncthreads();
  if (tid == 0) {
    offsets[0] = 0;
    tile_offsets[0] = 0;
    for (int e = 0; e < num_experts; ++e) {
      offsets[e + 1] = offsets[e] + counts[e];
      tile_offsets[e + 1] = tile_offsets[e] + (counts[e] + a.tile_rows - 1) / a.tile_rows;
    }
    if (a.tile_order == MoeTileOrder::paired) paired_positions(tile_offsets, num_experts, pair_position, odd_position);
  }
  __syncthreads();
  for (int e = tid; e <= num_experts; e += blockDim.x) a.expert_offsets[e] = offsets[e];
  for (int p = tid; p < a.num_pairs; p += blockDim.x) {
    const int e = a.expert_ids[p];
    const int slot = offsets[e] + atomicAdd(&cursor[e], 1);
    a.slot_of_pair[p] = slot;
    a.row_of_slot[slot] = p / a.k;
  }
  const int num_tiles = tile_offsets[num_experts];
  if (a.tile_order == MoeTileOrder::paired) {
    for (int t = num_tiles + tid; t < a.max_tiles; t += blockDim.x) {
      a.tile_expert[t] = -1;
      a.tile_first_slot[t] = 0;
    }
    // A thread an expert writes its tiles where paired_positions put them.
    for (int e = tid; e < num_experts; e += blockDim.x) {
      const int num_expert_tiles = tile_offsets[e + 1] - tile_offsets[e];
      for (int j = 0; j < num_expert_tiles; ++j) {
        const int t = j < (num_expert_tiles & ~1) ? pair_position[e] + j : odd_position[e];
        a.tile_expert[t] = e;
        a.tile_first_slot[t] = offsets[e] + j * a.tile_rows;
      }
    }
    return;
  }
  for (int t = tid; t < a.max_tiles; t += blockDim.x) {
    if (t >= num_tiles) {
      a.tile_expert[t] = -1;
      a.tile_first_slot[t] = 0;
      continue;
    }
    // The last expert whose tiles start at or before t (experts without
    // tiles share their start with the next one).
    int lo = 0, hi = num_experts - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (tile_offsets[mid] <= t) lo = mid; else hi = mid - 1;
    }
    a.tile_expert[t] = lo;
    a.tile_first_slot[t] = offsets[lo] + (t - tile_offsets[lo]) * a.tile_rows;
  }
}

__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(MoeCombineArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ int slots[kMaxChoices];
  __shared__ float weights[kMaxChoices];
  const std::int64_t row = blockIdx.x;
  if (threadIdx.x < a.k) {
    slots[threadIdx.x] = a.slot_of_pair[row * a.k + threadIdx.x];
    weights[threadIdx.x] = a.weights[row * a.k + threadIdx.x];
  }
  __syncthreads();
  const auto* y = static_cast<const __nv_bfloat16*>(a.y);
  if (a.hidden % 8 == 0) {
    // 8 columns a thread, 16-byte loads of y, a pair's loads in flight
    // together (bf16 loads one at a time read y at ~1.6 TB/s; session 12).
    for (std::int64_t c = threadIdx.x * 8; c < a.hidden; c += blockDim.x * 8) {
      float acc[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = load_f(a.out, a.out_dt, row * a.hidden + c + e);
      for (int j0 = 0; j0 < a.k; j0 += 8) {
        uint4 v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (j0 + j < a.k) v[j] = *reinterpret_cast<const uint4*>(y + slots[j0 + j] * a.hidden + c);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (j0 + j >= a.k) break;
          const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v[j]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(h[e]);
            acc[2 * e] += weights[j0 + j] * f.x;
            acc[2 * e + 1] += weights[j0 + j] * f.y;
          }
        }
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) store_f(a.out, a.out_dt, row * a.hidden + c + e, acc[e]);
    }
    return;
  }
  for (std::int64_t c = threadIdx.x; c < a.hidden; c += blockDim.x) {
    const std::int64_t i = row * a.hidden + c;
    float acc = load_f(a.out, a.out_dt, i);
    for (int j = 0; j < a.k; ++j) acc += weights[j] * __bfloat162float(y[slots[j] * a.hidden + c]);
    store_f(a.out, a.out_dt, i, acc);
  }
}

}  // namespace

void launch_moe_plan(const MoePlanArgs& args, const Launch& launch) {
  SLUICE_CHECK(args.num_experts > 0 && args.num_experts <= kMoeMaxExperts);
  SLUICE_CHECK(args.tile_rows > 0 && args.k > 0);
  SLUICE_CHECK_EQ(args.max_tiles, moe_max_tiles(args.num_pairs, args.num_experts, args.tile_rows));
  launch_kernel(moe_plan_kernel, dim3(1), dim3(kPlanThreads), 0, launch, args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_moe_combine(const MoeCombineArgs& args, const Launch& launch) {
  SLUICE_CHECK(args.k > 0 && args.k <= kMaxChoices);
  if (args.rows == 0) return;
  launch_kernel(moe_combine_kernel, dim3(static_cast<unsigned>(args.rows)), dim3(kCombineThreads), 0, launch,
                args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
