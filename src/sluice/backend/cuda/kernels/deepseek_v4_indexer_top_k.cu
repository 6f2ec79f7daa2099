// The lightning indexer's exact top-k per query row (launch_v4_indexer_top_k,
// deepseek_v4_kernels.h): the top min(top_k, n) scores, ties to the lower
// entry, written in ascending entry order.
//
// One block per row. The scores live in global memory (a 128k row: 32,768
// floats), so what a row costs is how often they are read. Session 22's
// selection read them six times: a radix select of 4 passes of 8 bits (each
// bin found by a warp's scan) for the k-th largest value, then an ordered
// sweep that counts, and one that writes.
//
// Now a row reads them about once:
//   1. a sample (8 of every 128 scores, 1/16 of the bytes) gives a threshold
//      the row's top ~2k clear: the top 16 bits of the sample's
//      (2k n_sample / n)-th largest;
//   2. one sweep keeps every score at or above it as a candidate, each warp
//      in its own list over its own slice, so the lists hold the candidates
//      in entry order;
//   3. the same radix select over the candidates (in shared memory) finds
//      the k-th largest, and an ordered walk of the lists writes the picks.
// When the threshold was too high (fewer than k candidates) or a warp's list
// overflows its room, the row falls back to session 22's selection over all of its
// scores, so the result is exact either way; the sample only sets the speed.
//
// Session 27's form (set_v4_indexer_top_k_session27; 15-20% slower on i.i.d.
// rows in S29, so session 23's stays the default): a row that starts on 16
// bytes (the forward pads the scores' width to 4) is sampled and swept 16
// bytes a load (session 23's 4 scalar loads a lane kept ~32 KB a
// multiprocessor in flight and read the scores at ~2.2 TB/s; 3 float4s a lane
// keep 72 KB), and the lists share one pool, each sized by its slice's sample
// hits (session 23's have 128 places each).
//
// Session 32's bulk sweep (set_v4_indexer_top_k_bulk_sweep; 15-18% slower
// than session 23's in S33-1, so opt-in): session 23's form, but each warp
// streams its slice through its own ring of four 512-byte stages in shared memory, filled by TMA bulk copies
// that lane 0 issues. The first four are issued before the sample is read,
// so they land under the sample's selection, and a multiprocessor's three
// blocks (40 registers) keep up to 96 KB in flight where session 23's four
// kept 32 KB. Taken where every row starts on 16 bytes (a width that is a
// multiple of 4 and an aligned buffer), else session 23's form runs.
//
// Session 35's narrow blocks (set_v4_indexer_top_k_blocks; the default from
// kV4TopKNarrowFromRows rows since session 36): session 23's form in
// 256-thread blocks, 8 rows a multiprocessor instead of 4, each warp with
// twice the slice and list room. On an H100 3-7% faster on prefill chunks,
// 26% slower at decode's 64 rows, 6% slower on crowded rows (S35-4); on the
// H200 4-10% faster from 2,048 rows, equal at 1,024 (S36-1).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/backend/cuda/kernels/mbarrier.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/tma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

// 512 threads and 28 KB (session 27: 44 KB) of shared memory: 4 blocks a
// multiprocessor, so one row's barrier-bound selection runs under the others'
// sweeps. The float4 sweep needs more than 32 registers (ptxas spills at any
// depth there), so session 27's form runs 3 blocks a multiprocessor at 40.
constexpr int kThreads = 512;
// Session 35's narrow form (set_v4_indexer_top_k_blocks): 256 threads,
// 8 blocks (rows) a multiprocessor at the same 32 registers, so twice the
// rows' barrier-bound phases (the radix selects, the picks) overlap others'
// sweeps; the pool keeps its 2,048 places (256 a warp), so 8 blocks take
// ~225 KB of shared memory.
constexpr int kNarrowThreads = 256;
// The bulk sweep's ring loop needs more than 32 registers too (32 bytes of
// spills at 4 blocks), so it runs 3 blocks a multiprocessor at 40.
constexpr int blocks_per_sm(bool session27, bool bulk, int threads) {
  return threads == kNarrowThreads ? 8 : session27 || bulk ? 3 : 4;
}
constexpr int kWarps = kThreads / 32;
// The candidates' pool: session 23's 128 places a warp, or session 27's 4,096
// (32 KB of keys and entries) shared by the warps' lists.
constexpr int warp_candidates(int threads) { return 128 * kThreads / threads; }
constexpr int pool_candidates(bool session27, int threads) {
  return session27 ? 4096 : threads / 32 * warp_candidates(threads);
}
// Session 27: a list's room besides what its sample hits ask. A slice's hits
// are few (k 512 at 32k: ~4 of its 128 sampled scores), so the estimate is
// noisy where it is small: with 64, a slice with no hit (~2% of slices) gets
// 64 places for ~64 candidates, and ~9% of rows of i.i.d. scores overflowed a
// list and fell back to the six reads (host simulation of this sizing); with
// 128 (session 23's fixed room) none did, and the crowded rows' still fit:
// 16 x 128 + 1.5 x ~1,100 < the pool's 4,096 at k 512.
constexpr int kMinListCandidates = 128;
constexpr int kSampleRun = 8;         // scores a sample takes together (32 bytes: one sector)
constexpr int kSampleStride = 128;    // ... of every 128
constexpr int kMaxSample = 2560;      // rows up to 40,960 scores sample; longer ones take the fallback
// Rows shorter than this, or whose k is a large part of them, gain nothing from sampling.
constexpr int kMinSampledRow = 4096;
// The row entry that sample i reads.
__device__ __forceinline__ int sample_entry(int i) { return i / kSampleRun * kSampleStride + i % kSampleRun; }
// The bulk sweep's ring: a warp's stages of 128 scores (a load of 4 scores a lane).
constexpr int kRingStages = 4;
constexpr int kStageEntries = 128;
constexpr int kRingBytes = kWarps * kRingStages * kStageEntries * 4;  // 32 KB, dynamic shared memory
bool g_sampled = true;        // set_v4_indexer_top_k_sampled()
bool g_session27 = false;     // set_v4_indexer_top_k_session27()
bool g_bulk_sweep = false;    // set_v4_indexer_top_k_bulk_sweep()
V4TopKBlocks g_blocks = V4TopKBlocks::by_rows;  // set_v4_indexer_top_k_blocks()

template <int kT>  // the block's threads
struct SelectScratch {
  int histogram[256];
  int warp_sums[kT / 32];
  std::uint32_t prefix;
  int remaining;
};

// The k-th largest of the keys `for_each_key` hands this thread (every
// thread of the block calls it; each key once over the block), and how many
// of the keys equal to it the top k takes: 4 passes of 8 bits from the top,
// each pass's bin found by a warp's scan over the 256 bins.
struct Threshold {
  std::uint32_t key;
  int ties_taken;
};
// kLastShift 16 stops after the top 16 bits: `key` is then the k-th largest
// key's top half (low bits 0), a bound at or below it, and ties_taken moot.
template <int kLastShift = 0, int kT, typename ForEachKey>
__device__ Threshold radix_select(ForEachKey for_each_key, int k, SelectScratch<kT>& s) {
  std::uint32_t prefix = 0, prefix_mask = 0;
  int remaining = k;  // how many of the keys matching prefix still to take, from the top
  for (int shift = 24; shift >= kLastShift; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kT) s.histogram[i] = 0;
    __syncthreads();
    for_each_key([&](std::uint32_t key) {
      if ((key & prefix_mask) == prefix) atomicAdd(&s.histogram[(key >> shift) & 0xffu], 1);
    });
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l sums bins 255 - 8 l down to 248 - 8 l; a scan over the lanes
      // finds the lane holding the remaining-th largest, that lane its bin
      // (bin 0 takes what is left, as a serial walk would).
      const int lane = threadIdx.x;
      int counts[8], sum = 0;
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        counts[b] = s.histogram[255 - 8 * lane - b];
        sum += counts[b];
      }
      int inclusive = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += v;
      }
      const unsigned reached = __ballot_sync(0xffffffffu, inclusive >= remaining);
      const int owner = reached != 0 ? __ffs(reached) - 1 : 31;
      if (lane == owner) {
        int r = remaining - (inclusive - sum), b = 0;
        for (; b < 7; ++b) {
          if (counts[b] >= r) break;
          r -= counts[b];
        }
        s.prefix = prefix | (static_cast<std::uint32_t>(255 - 8 * lane - b) << shift);
        s.remaining = r;
      }
    }
    __syncthreads();
    prefix = s.prefix;
    remaining = s.remaining;
    prefix_mask |= 0xffu << shift;
    __syncthreads();
  }
  return {prefix, remaining};
}

// Writes the picks of a threshold in ascending entry order. Each warp holds
// n_here keys in entry order (key_at(i), their entries entry_at(i), i <
// n_here; warp w's all before warp w + 1's) and walks them twice, 32 at a
// time: to count, then, with the counts of the warps before it, to write.
template <int kT, typename KeyAt, typename EntryAt>
__device__ void write_picks(Threshold t, int n_here, KeyAt key_at, EntryAt entry_at, std::int32_t* selected,
                            SelectScratch<kT>& s) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned lanes_below = (1u << lane) - 1u;
  int greater = 0, ties = 0;
  for (int base = 0; base < n_here; base += 32) {
    const int i = base + lane;
    const std::uint32_t key = i < n_here ? key_at(i) : 0u;
    greater += __popc(__ballot_sync(0xffffffffu, i < n_here && key > t.key));
    ties += __popc(__ballot_sync(0xffffffffu, i < n_here && key == t.key));
  }
  if (lane == 0) s.warp_sums[warp] = ties;
  __syncthreads();
  int tie_rank = 0;
  for (int w = 0; w < warp; ++w) tie_rank += s.warp_sums[w];
  const int ties_here = min(max(t.ties_taken - tie_rank, 0), ties);
  __syncthreads();
  if (lane == 0) s.warp_sums[warp] = greater + ties_here;
  __syncthreads();
  int slot = 0;
  for (int w = 0; w < warp; ++w) slot += s.warp_sums[w];
  for (int base = 0; base < n_here; base += 32) {
    const int i = base + lane;
    const std::uint32_t key = i < n_here ? key_at(i) : 0u;
    const bool tie = i < n_here && key == t.key;
    const unsigned tie_lanes = __ballot_sync(0xffffffffu, tie);
    const bool take =
        i < n_here && (key > t.key || (tie && tie_rank + __popc(tie_lanes & lanes_below) < t.ties_taken));
    const unsigned take_lanes = __ballot_sync(0xffffffffu, take);
    if (take) selected[slot + __popc(take_lanes & lanes_below)] = entry_at(i);
    slot += __popc(take_lanes);
    tie_rank += __popc(tie_lanes);
  }
}

// Warp w's slice of n entries: [lo, lo + len), whole groups of `granule`
// (32: a load a lane; 128: a float4 a lane) but the last.
struct Slice {
  int lo, len;
};
template <int kT>
__device__ __forceinline__ int warp_slice_length(int n, int granule) {
  constexpr int kW = kT / 32;
  return ((n + kW - 1) / kW + granule - 1) / granule * granule;
}
template <int kT>
__device__ __forceinline__ Slice warp_slice(int n, int granule = 32) {
  const int per_warp = warp_slice_length<kT>(n, granule);
  const int lo = min(n, (threadIdx.x >> 5) * per_warp);
  return {lo, min(n, lo + per_warp) - lo};
}

// Session 22's selection over all of a row's scores in global memory.
template <int kT>
__device__ void select_from_scores(const float* scores, int n, int k, std::int32_t* selected, SelectScratch<kT>& s) {
  const Threshold t = radix_select(
      [&](auto&& f) {
        for (int i = threadIdx.x; i < n; i += kT) f(float_order_key(scores[i]));
      },
      k, s);
  const Slice slice = warp_slice<kT>(n);
  write_picks(
      t, slice.len, [&](int i) { return float_order_key(scores[slice.lo + i]); },
      [&](int i) { return slice.lo + i; }, selected, s);
}

// kSession27: the float4 sweep and the lists sized by the sample; kBulk
// (session 23's lists, rows on 16 bytes): the bulk-copy ring (above).
template <bool kSession27, bool kBulk, int kT>  // kT: the block's threads
__global__ void __launch_bounds__(kT, blocks_per_sm(kSession27, kBulk, kT))
    v4_indexer_top_k_kernel(V4IndexerArgs args, bool sampled_rows) {
  static_assert(!(kSession27 && kBulk));
  static_assert(kT == kThreads || (!kSession27 && !kBulk), "sessions 27 and 32's forms run 512 threads");
  constexpr int kW = kT / 32;
  constexpr int kPoolCandidates = pool_candidates(kSession27, kT);
  extern __shared__ __align__(128) float ring_stages[];  // kBulk: [kW][kRingStages][kStageEntries]
  __shared__ __align__(8) std::uint64_t ring_full[kBulk ? kW * kRingStages : 1];
  __shared__ SelectScratch<kT> scratch;
  __shared__ std::uint32_t sample[kMaxSample];
  __shared__ std::uint32_t candidate_key[kPoolCandidates];
  __shared__ std::int32_t candidate_entry[kPoolCandidates];
  __shared__ int candidate_count[kW];
  __shared__ int list_base[kW], list_size[kW];  // a warp's list: [base, base + size) of the pool
  __shared__ int fallback;
  const int row = blockIdx.x;
  const int n = args.num_visible[row];
  const int k = min(args.top_k, n);
  const float* scores = args.scores + static_cast<std::int64_t>(row) * args.max_visible;
  std::int32_t* selected = args.selected + static_cast<std::int64_t>(row) * args.top_k;
  for (int i = k + threadIdx.x; i < args.top_k; i += kT) selected[i] = -1;
  if (threadIdx.x == 0) args.num_selected[row] = k;
  if (k == n) {  // every visible entry
    for (int i = threadIdx.x; i < n; i += kT) selected[i] = i;
    return;
  }
  const int sampled = n / kSampleStride * kSampleRun;
  // The sample's rank whose value ~2k scores of the row clear.
  const int sample_rank = static_cast<int>((2LL * k * sampled + n - 1) / n);
  if (!sampled_rows || n < kMinSampledRow || sampled > kMaxSample || sample_rank < 1 || sample_rank >= sampled) {
    select_from_scores(scores, n, k, selected, scratch);
    return;
  }
  const bool vector_row = kSession27 && (reinterpret_cast<std::uintptr_t>(scores) & 15u) == 0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // The bulk sweep's ring: its first stages are issued now, to land under the sample.
  auto ring_loads = [](const Slice& slice) { return (slice.len + kStageEntries - 1) / kStageEntries; };
  auto ring_at = [&](int stage, int i) -> float& {
    return ring_stages[(warp * kRingStages + stage) * kStageEntries + i];
  };
  auto ring_bar = [&](int stage) { return smem_addr(&ring_full[warp * kRingStages + stage]); };
  // Lane 0: load j of the slice into its stage (a multiple of 4 scores: rows
  // on 16 bytes end on 16 bytes, so the rounding stays inside the row).
  auto issue_ring_load = [&](const Slice& slice, int j) {
    const int stage = j % kRingStages;
    const int count = min(kStageEntries, slice.len - kStageEntries * j);
    const auto bytes = static_cast<std::uint32_t>((count + 3) / 4 * 16);
    fence_proxy_async();  // the lanes' reads of this stage's last load before the copy's writes
    mbarrier_arrive_expect_tx(ring_bar(stage), bytes);
    bulk_load(smem_addr(&ring_at(stage, 0)), scores + slice.lo + kStageEntries * j, bytes, ring_bar(stage));
  };
  if constexpr (kBulk) {
    if (lane == 0) {
      for (int stage = 0; stage < kRingStages; ++stage) mbarrier_init(ring_bar(stage), 1);
      fence_mbarrier_init_cluster();
      const Slice slice = warp_slice<kT>(n, kStageEntries);  // recomputed at the sweep: nothing held across the sample
      for (int j = 0; j < min(ring_loads(slice), kRingStages); ++j) issue_ring_load(slice, j);
    }
    __syncwarp();
  }
  // 1. The threshold from the sample.
  if (vector_row) {  // a run of 8 is two float4s
    for (int j = threadIdx.x; j < sampled / 4; j += kT) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(scores + j / 2 * kSampleStride + j % 2 * 4));
      sample[4 * j] = float_order_key(v.x);
      sample[4 * j + 1] = float_order_key(v.y);
      sample[4 * j + 2] = float_order_key(v.z);
      sample[4 * j + 3] = float_order_key(v.w);
    }
  } else {
    for (int i = threadIdx.x; i < sampled; i += kT)
      sample[i] = float_order_key(scores[sample_entry(i)]);
  }
  __syncthreads();
  // Its top 16 bits suffice: a lower bar only lists a few more candidates.
  const Threshold bar = radix_select<16>(
      [&](auto&& f) {
        for (int i = threadIdx.x; i < sampled; i += kT) f(sample[i]);
      },
      sample_rank, scratch);
  // 2. The lists' rooms in the pool. Session 27: a slice's sample hits times
  // the sampling rate, half again and kMinListCandidates more (scaled down to
  // the pool if they overrun it); session 23: warp_candidates(kT) each.
  const unsigned lanes_below = (1u << lane) - 1u;
  // The sweep's slices (the bulk ring's must be the ones its first loads were issued for).
  const int granule = kBulk ? kStageEntries : vector_row ? 128 : 32;
  if constexpr (kSession27) {
    const int per_warp = warp_slice_length<kT>(n, granule);
    if (threadIdx.x < kW) candidate_count[threadIdx.x] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < sampled; i += kT)
      if (sample[i] >= bar.key) atomicAdd(&candidate_count[sample_entry(i) / per_warp], 1);
    __syncthreads();
    if (threadIdx.x < 32) {
      const int estimate = lane < kW ? candidate_count[lane] * (kSampleStride / kSampleRun) : 0;
      int size = lane < kW ? estimate + estimate / 2 + kMinListCandidates : 0;
      const int total = static_cast<int>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(size)));
      if (total > kPoolCandidates) size = static_cast<int>(static_cast<long long>(size) * kPoolCandidates / total);
      int inclusive = size;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += v;
      }
      if (lane < kW) {
        list_base[lane] = inclusive - size;
        list_size[lane] = size;
      }
    }
  } else if (threadIdx.x < kW) {
    list_base[threadIdx.x] = threadIdx.x * warp_candidates(kT);
    list_size[threadIdx.x] = warp_candidates(kT);
  }
  __syncthreads();
  // 3. One sweep: each warp lists its slice's scores >= the threshold, in entry order.
  const Slice slice = warp_slice<kT>(n, granule);
  // The list's next free place in the pool, and where its room ends.
  int cursor = list_base[warp];
  const int list_end = cursor + list_size[warp];
  // Lists what a lane holds: the first `count` of v's scores (at most
  // `width`: 4, or 1 where only v.x is loaded), consecutive entries from
  // `entry`, after the candidates of the lanes below it.
  auto list = [&](float4 v, int entry, int count, auto width) {
    constexpr int kWidth = decltype(width)::value;
    const std::uint32_t keys[4] = {float_order_key(v.x), float_order_key(v.y), float_order_key(v.z),
                                   float_order_key(v.w)};
    unsigned kept = 0;  // bit c: keys[c] is a candidate
#pragma unroll
    for (int c = 0; c < kWidth; ++c)
      if (c < count && keys[c] >= bar.key) kept |= 1u << c;
    int below = 0, all = 0;
#pragma unroll
    for (int c = 0; c < kWidth; ++c) {
      const unsigned lanes = __ballot_sync(0xffffffffu, (kept >> c) & 1u);
      below += __popc(lanes & lanes_below);
      all += __popc(lanes);
    }
    int at = cursor + below;
#pragma unroll
    for (int c = 0; c < kWidth; ++c) {
      if ((kept >> c) & 1u) {
        if (at < list_end) {
          candidate_key[at] = keys[c];
          candidate_entry[at] = entry + c;
        }
        ++at;
      }
    }
    cursor += all;
  };
  // Loads a lane keeps in flight before their scores are listed (one at a
  // time, the sweep ran at a load's latency: 1.15 TB/s): 48 or 16 bytes.
  constexpr int kSweepLoads = kSession27 ? 3 : 4;
  if constexpr (kBulk) {  // 128 consecutive entries a stage, lane l's at l + 32 u (no bank conflicts)
    for (int j = 0; j < ring_loads(slice); ++j) {
      const int stage = j % kRingStages;
      mbarrier_wait(ring_bar(stage), static_cast<std::uint32_t>(j / kRingStages) & 1u);
#pragma unroll
      for (int u = 0; u < 4; ++u) {  // a score at a time from shared memory: no registers held across
        const int i = kStageEntries * j + 32 * u + lane;
        list(make_float4(ring_at(stage, 32 * u + lane), 0.0f, 0.0f, 0.0f), slice.lo + i,
             i < slice.len ? 1 : 0, std::integral_constant<int, 1>{});
      }
      __syncwarp();  // the stage is read: refill it
      if (lane == 0 && j + kRingStages < ring_loads(slice)) issue_ring_load(slice, j + kRingStages);
    }
  } else if (vector_row) {  // 128 consecutive entries a load of the warp, 4 a lane
    for (int base = 0; base < slice.len; base += 128 * kSweepLoads) {
      float4 v[kSweepLoads];
#pragma unroll
      for (int u = 0; u < kSweepLoads; ++u) {
        const int i = base + 128 * u + 4 * lane;
        const float* at = scores + slice.lo + i;
        if (i + 4 <= slice.len) {
          v[u] = __ldcs(reinterpret_cast<const float4*>(at));
        } else {  // the row's last, partial group (slice.len - i < 4 scores, maybe none)
          v[u].x = i < slice.len ? at[0] : 0.0f;
          v[u].y = i + 1 < slice.len ? at[1] : 0.0f;
          v[u].z = i + 2 < slice.len ? at[2] : 0.0f;
          v[u].w = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kSweepLoads; ++u) {
        const int i = base + 128 * u + 4 * lane;
        list(v[u], slice.lo + i, min(4, max(0, slice.len - i)), std::integral_constant<int, 4>{});
      }
    }
  } else {  // 32 consecutive entries a load of the warp
    for (int base = 0; base < slice.len; base += 32 * kSweepLoads) {
      float v[kSweepLoads];
#pragma unroll
      for (int u = 0; u < kSweepLoads; ++u) {
        const int i = base + 32 * u + lane;
        v[u] = i < slice.len ? scores[slice.lo + i] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kSweepLoads; ++u) {
        const int i = base + 32 * u + lane;
        list(make_float4(v[u], 0.0f, 0.0f, 0.0f), slice.lo + i, i < slice.len ? 1 : 0,
             std::integral_constant<int, 1>{});
      }
    }
  }
  const int list_at = list_base[warp], listed = cursor - list_at;
  if (lane == 0) candidate_count[warp] = listed;
  if (threadIdx.x == 0) fallback = 0;
  __syncthreads();
  if (threadIdx.x < 32) {
    const int c = threadIdx.x < kW ? candidate_count[threadIdx.x] : 0;
    const int total = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(c));
    const bool overflow = __any_sync(0xffffffffu, threadIdx.x < kW && c > list_size[threadIdx.x]);
    if (threadIdx.x == 0) fallback = overflow || total < k;
  }
  __syncthreads();
  if (fallback) {
    select_from_scores(scores, n, k, selected, scratch);
    return;
  }
  // 4. The exact selection among the candidates, written in entry order.
  const Threshold t = radix_select(
      [&](auto&& f) {
        for (int j = lane; j < listed; j += 32) f(candidate_key[list_at + j]);
      },
      k, scratch);
  write_picks(
      t, listed, [&](int j) { return candidate_key[list_at + j]; },
      [&](int j) { return candidate_entry[list_at + j]; }, selected, scratch);
}

}  // namespace

void set_v4_indexer_top_k_sampled(bool sampled) { g_sampled = sampled; }
void set_v4_indexer_top_k_session27(bool session27) { g_session27 = session27; }
void set_v4_indexer_top_k_bulk_sweep(bool bulk) { g_bulk_sweep = bulk; }
void set_v4_indexer_top_k_blocks(V4TopKBlocks blocks) { g_blocks = blocks; }

void launch_v4_indexer_top_k(const V4IndexerArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.top_k > 0 && args.max_visible >= 0);
  SLUICE_CHECK(args.scores != nullptr && args.selected != nullptr && args.num_selected != nullptr &&
               args.num_visible != nullptr);
  if (args.rows == 0) return;
  const bool rows_on_16_bytes =
      args.max_visible % 4 == 0 && (reinterpret_cast<std::uintptr_t>(args.scores) & 15u) == 0;
  const auto blocks = static_cast<unsigned>(args.rows);
  if (g_session27) {
    v4_indexer_top_k_kernel<true, false, kThreads><<<blocks, kThreads, 0, stream>>>(args, g_sampled);
  } else if (g_bulk_sweep && rows_on_16_bytes) {
    static const bool configured = [] {
      SLUICE_CUDA_CHECK(cudaFuncSetAttribute(v4_indexer_top_k_kernel<false, true, kThreads>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes));
      SLUICE_CUDA_CHECK(cudaFuncSetAttribute(v4_indexer_top_k_kernel<false, true, kThreads>,
                                             cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared));
      return true;
    }();
    (void)configured;
    v4_indexer_top_k_kernel<false, true, kThreads><<<blocks, kThreads, kRingBytes, stream>>>(args, g_sampled);
  } else if (g_blocks == V4TopKBlocks::narrow ||
             (g_blocks == V4TopKBlocks::by_rows && args.rows >= kV4TopKNarrowFromRows)) {
    static const bool configured = [] {  // 8 blocks of ~28 KB: all of the multiprocessor's shared memory
      SLUICE_CUDA_CHECK(cudaFuncSetAttribute(v4_indexer_top_k_kernel<false, false, kNarrowThreads>,
                                             cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared));
      return true;
    }();
    (void)configured;
    v4_indexer_top_k_kernel<false, false, kNarrowThreads><<<blocks, kNarrowThreads, 0, stream>>>(args, g_sampled);
  } else {
    v4_indexer_top_k_kernel<false, false, kThreads><<<blocks, kThreads, 0, stream>>>(args, g_sampled);
  }
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
