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
static_assert(kPlanThreads >= kMoeMaxExperts, "the plan's scan takes a thread an expert");
constexpr int kPlanChunk = 8;  // pairs a thread loads before it uses them
constexpr int kCombineThreads = 256;
constexpr int kMaxChoices = 64;

// An expert's place in the plan, as sums over the experts before it: its
// slots, its tiles, its tiles two by two (MoeTileOrder::paired), whether its
// tile count is odd, and its tiles if so (MoeTileOrder::paired_odd_couples).
struct ExpertSums {
  int slots, tiles, even_tiles, odd, odd_tiles;
};
__device__ __forceinline__ ExpertSums operator+(ExpertSums a, ExpertSums b) {
  return {a.slots + b.slots, a.tiles + b.tiles, a.even_tiles + b.even_tiles, a.odd + b.odd,
          a.odd_tiles + b.odd_tiles};
}
__device__ __forceinline__ ExpertSums shfl_up(ExpertSums v, int delta) {
  return {__shfl_up_sync(0xffffffffu, v.slots, delta), __shfl_up_sync(0xffffffffu, v.tiles, delta),
          __shfl_up_sync(0xffffffffu, v.even_tiles, delta), __shfl_up_sync(0xffffffffu, v.odd, delta),
          __shfl_up_sync(0xffffffffu, v.odd_tiles, delta)};
}
// The sums over the threads before this one (expert tid's), and over all of
// them into *total. Every thread of the block calls it.
__device__ ExpertSums exclusive_sums(ExpertSums mine, ExpertSums* warp_totals, ExpertSums* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  ExpertSums inclusive = mine;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const ExpertSums up = shfl_up(inclusive, d);
    if (lane >= d) inclusive = inclusive + up;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    ExpertSums t = lane < warps ? warp_totals[lane] : ExpertSums{};
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const ExpertSums up = shfl_up(t, d);
      if (lane >= d) t = t + up;
    }
    if (lane < warps) warp_totals[lane] = t;  // inclusive over warps
    if (lane == warps - 1) *total = t;
  }
  __syncthreads();
  const ExpertSums before_warp = warp > 0 ? warp_totals[warp - 1] : ExpertSums{};
  const ExpertSums exclusive = before_warp + inclusive;
  return {exclusive.slots - mine.slots, exclusive.tiles - mine.tiles, exclusive.even_tiles - mine.even_tiles,
          exclusive.odd - mine.odd, exclusive.odd_tiles - mine.odd_tiles};
}

// One block, a thread an expert: a histogram of the pairs, the experts'
// places by a block-wide scan, a scatter of the pairs into slots and the
// tiles. The pairs' loads go kPlanChunk at a time ahead of their atomics and
// stores, so a thread waits for memory a few times, not once a pair (one
// pair at a time, 4,096 tokens x 8 took ~70 us, S35-7).
//
// MoeTileOrder::paired: experts in order, each one's tiles two by two from
// pair_position[e]; an expert with an odd count keeps its last tile back
// until the next such expert, and the two go in the pair after that
// expert's own pairs (odd_position). A last odd tile left over takes the
// position before num_tiles, its partner num_tiles (-1). So positions
// [0, num_tiles) are every tile once, in pairs (2p, 2p + 1). As sums: the
// pairs before expert e take its even tiles before it plus two a pair of
// odd experts before it.
//
// MoeTileOrder::by_expert_balanced: as by_expert, each expert's tiles of
// balanced_tile_rows(count, tile_rows) rows.
//
// MoeTileOrder::paired_odd_couples: first the experts with an even tile
// count, in order, each one's tiles two by two; then those with an odd count,
// in couples: the first one's tiles (its last, partial one at an even
// position), then the second one's last tile beside it and its other tiles.
// So an odd tile reads its weight tiles while its own expert's pairs do
// (under paired it runs after every even expert between the couple, by when
// its weight tiles have left L2: session 49). A last odd expert without a
// partner ends the list, its partner position num_tiles (-1). As sums: an
// even expert's tiles start after the even experts' tiles before it, an odd
// expert's after every even expert's and the odd experts' tiles before it.
__global__ void __launch_bounds__(kPlanThreads, 1) moe_plan_kernel(MoePlanArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ int counts[kMoeMaxExperts];
  __shared__ int cursor[kMoeMaxExperts];
  __shared__ int offsets[kMoeMaxExperts + 1];
  __shared__ int tile_offsets[kMoeMaxExperts + 1];
  __shared__ int odd_expert[kMoeMaxExperts];  // paired: the experts with an odd tile, in order
  __shared__ ExpertSums warp_totals[kPlanThreads / 32];
  __shared__ ExpertSums total;
  const int tid = threadIdx.x, num_experts = a.num_experts;
  if (tid < num_experts) {
    counts[tid] = 0;
    cursor[tid] = 0;
  }
  __syncthreads();
  constexpr int kPass = kPlanThreads * kPlanChunk;
  // This thread's pairs of the pass at `base`: pair base + j kPlanThreads + tid's expert, -1 past the last.
  const auto load_pass = [&](int base, int (&e)[kPlanChunk]) {
#pragma unroll
    for (int j = 0; j < kPlanChunk; ++j) {
      const int p = base + j * kPlanThreads + tid;
      e[j] = p < a.num_pairs ? a.expert_ids[p] : -1;
    }
  };
  for (int base = 0; base < a.num_pairs; base += kPass) {
    int e[kPlanChunk];
    load_pass(base, e);
#pragma unroll
    for (int j = 0; j < kPlanChunk; ++j)
      if (e[j] >= 0) atomicAdd(&counts[e[j]], 1);
  }
  __syncthreads();
  const int count = tid < num_experts ? counts[tid] : 0;
  const bool balanced = a.tile_order == MoeTileOrder::by_expert_balanced;
  const int tiles = balanced ? balanced_tiles(count, a.tile_rows) : (count + a.tile_rows - 1) / a.tile_rows;
  const bool odd = tiles & 1;
  const ExpertSums before = exclusive_sums({count, tiles, tiles & ~1, odd, odd ? tiles : 0}, warp_totals, &total);
  if (tid < num_experts) {
    offsets[tid] = before.slots;
    tile_offsets[tid] = before.tiles;
  }
  if (tid == 0) {
    offsets[num_experts] = total.slots;
    tile_offsets[num_experts] = total.tiles;
  }
  const bool couples = a.tile_order == MoeTileOrder::paired_odd_couples;
  const bool paired = a.tile_order == MoeTileOrder::paired || couples;
  if (a.tile_order == MoeTileOrder::paired && tid < num_experts && odd) odd_expert[before.odd] = tid;
  __syncthreads();
  for (int e = tid; e <= num_experts; e += blockDim.x) a.expert_offsets[e] = offsets[e];
  for (int base = 0; base < a.num_pairs; base += kPass) {
    int e[kPlanChunk];
    load_pass(base, e);
#pragma unroll
    for (int j = 0; j < kPlanChunk; ++j) {
      if (e[j] < 0) continue;
      const int p = base + j * kPlanThreads + tid;
      const int slot = offsets[e[j]] + atomicAdd(&cursor[e[j]], 1);
      a.slot_of_pair[p] = slot;
      a.row_of_slot[slot] = p / a.k;
    }
  }
  const int num_tiles = total.tiles;
  if (paired) {
    for (int t = num_tiles + tid; t < a.max_tiles; t += blockDim.x) {
      a.tile_expert[t] = -1;
      a.tile_first_slot[t] = 0;
    }
    if (tid >= num_experts || tiles == 0) return;
    if (couples) {
      const int even_experts_tiles = total.tiles - total.odd_tiles;
      const int first = odd ? even_experts_tiles + before.odd_tiles : before.tiles - before.odd_tiles;
      const bool last_first = odd && (before.odd & 1);  // the couple's second: its last tile first
      for (int j = 0; j < tiles; ++j) {
        const int position = first + (!last_first ? j : j == tiles - 1 ? 0 : j + 1);
        a.tile_expert[position] = tid;
        a.tile_first_slot[position] = offsets[tid] + j * a.tile_rows;
      }
      return;
    }
    const int pair_position = before.even_tiles + 2 * (before.odd / 2);
    const int own_pairs_end = pair_position + (tiles & ~1);
    for (int j = 0; j < (tiles & ~1); ++j) {
      a.tile_expert[pair_position + j] = tid;
      a.tile_first_slot[pair_position + j] = offsets[tid] + j * a.tile_rows;
    }
    if (!odd) return;
    // Expert e's odd tile (its last) at position t.
    const auto place_odd_tile = [&](int e, int t) {
      a.tile_expert[t] = e;
      a.tile_first_slot[t] = offsets[e] + (tile_offsets[e + 1] - tile_offsets[e] - 1) * a.tile_rows;
    };
    if (before.odd & 1) {
      // This expert closes a pair: the waiting expert's odd tile first, its own second.
      place_odd_tile(odd_expert[before.odd - 1], own_pairs_end);
      place_odd_tile(tid, own_pairs_end + 1);
    } else if (before.odd + 1 == total.odd) {
      place_odd_tile(tid, total.even_tiles + 2 * (total.odd / 2));  // the lone last one, after every pair
    }  // else the next odd expert places this one's odd tile
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
    const int rows = balanced ? balanced_tile_rows(counts[lo], a.tile_rows) : a.tile_rows;
    a.tile_expert[t] = lo;
    a.tile_first_slot[t] = offsets[lo] + (t - tile_offsets[lo]) * rows;
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
