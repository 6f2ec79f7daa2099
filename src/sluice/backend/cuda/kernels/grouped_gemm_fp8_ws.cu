// Grouped FP8 GEMM for 128-slot tiles (prefill), warp specialised and
// persistent: the same product and numerics as grouped_gemm_fp8.cu's ring
// kernel (e4m3 wgmma m64n128k32, every 128-wide K block promoted into an f32
// sum with its A row scale and weight block scale), restructured the way
// Hopper GEMMs keep the tensor cores fed.
//
// Why: the ring kernel's two warpgroups copied, waited for their MMAs and met
// at a block-wide barrier every K block, so copies, MMAs and promotions ran
// one after the other (ncu, session 10: WARPGROUP.DEPBAR and the barrier the
// top stalls, 0.35 issued warps a scheduler a cycle), and each block's ring
// filled from empty and drained at its end (down GEMM: 16 K blocks a tile).
//
// Three warpgroups, one block an SM:
//   producer     (setmaxnreg down) fills a kStages-deep ring: each K block's
//                A rows (gathered through row_of_slot), the weight tile and
//                the stage's scales. Scales always, and A and W under
//                WsLoads::cp_async, go by cp.async: each thread keeps kLag
//                copy groups in flight, then waits for its oldest, fences it
//                for the async proxy and arrives on that stage's `full`
//                mbarrier (when A and W both come by TMA, the scales' copies
//                arrive on it themselves as they land: session 47). Under
//                the TMA loaders W goes by TMA (two boxes of
//                kN / 2 weight rows) completing bytes on the same `full`
//                barrier, and A too when its rows are consecutive (one box;
//                gathered rows stay on cp.async). Before refilling a stage it
//                waits on its `empty`.
//   consumers    (setmaxnreg up) 64 tile rows each: wait `full`, issue four
//                wgmma, read the stage's scales, wait for the MMAs, release the
//                stage (one arrival a warp on `empty`), promote. No block-wide
//                barrier: the two consumers drift apart, so one promotes
//                while the other's MMAs run.
// Persistent: the blocks walk the work items (tile, column block), column
// blocks fastest as the ring kernel's grid; producer and consumers walk the
// same items and count K blocks on through them, so the producer fills the
// next item's stages while the consumers run this one's epilogue.
//
// WsLoads::tma_weight_multicast2: clusters of 2 take a pair of tiles (the
// plan's tiles 2p and 2p + 1, MoeTileOrder::paired: two tiles of one expert
// where it can) at one column block, rank r tile 2p + r. Tiles of one expert
// read the same weight tile, so each block's producer loads one of its two
// 64-row boxes and multicasts it into both blocks: a weight tile leaves L2
// once a cluster, and an expert's two tiles read it together, not ~20 us
// apart (round-robin tiles drifted that far and read each weight tile from
// HBM twice; session 12). A stays per block (cp.async when gathered, one TMA
// box otherwise). A pair of two experts' odd tiles loads each block's weight
// tile alone; a lone last tile's partner block has no rows: it loads
// nothing, but waits for and releases every stage as an idle consumer does,
// so both blocks of a cluster always walk the same stages. A stage is refilled
// only once the consumers of both blocks released it: `empty` counts them
// all, each consumer warp arriving on both blocks' barriers.
//
// Removed after measuring slower (session 44): A multicast to clusters of 2
// or 4 blocks on neighbouring column blocks (S36-4: 4.82 / 4.94 ms for the
// layer at 4,096 tokens against the weight multicast's 4.66) and the
// consumers' two-accumulator form (4.88; S30 and S36-4). Removed in session
// 46: clusters of four, the weight tile multicast over a tile pair and the A
// tile over two column blocks (S46-1, S46-2: 21% fewer L2 reads, the layer
// 1-8% slower than the pairs'). Measured and not merged in session 47: two
// accumulators a consumer at 128 columns again (the MMAs alone no faster than
// n192's, the layer 6-8% slower; S47-1) and a producer of one warp (fewer
// instructions, the layer 10% slower: its stages land later; S47-2). Session
// 48: tiles of at most 64 rows split by columns between the two consumers
// (m64n96k32 halves, the SwiGLU weight tile interleaved so that each half
// holds whole gate / up pairs): both GEMMs 0.5-3.5% slower (S48-1); and the
// clusters of four again, after the fast SwiGLU: gate_up 4%, down 6% slower,
// their loads alone 13% slower than the pairs' (S48-2).
//
// Wide tiles (kN = 192 weight rows, WsTile; under the weight multicast only,
// the default since session 43): each consumer issues m64n192 MMAs over the
// same 64 A rows, so a stage's A tile serves more columns. Their column
// blocks start on multiples of 32, not of 128, so one weight scale covers a
// column group of 32 (kFp8ScaleGroupCols), and the last block may pass n:
// its extra columns are computed from whatever rows follow (TMA fills zeros
// past the tensor) and never stored.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_epilogue.cuh"
#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_kernel.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mbarrier.cuh"
#include "sluice/backend/cuda/kernels/moe_kernels.h"
#include "sluice/backend/cuda/kernels/tma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kBlockM = 128;  // tile slots: two consumers of 64 rows
constexpr int kBlockK = 128;  // one e4m3 line of 128 bytes = one scale block
constexpr int kGroupThreads = 128;
constexpr int kConsumers = 2;
constexpr int kThreads = kGroupThreads * (1 + kConsumers);
constexpr int kATileBytes = kBlockM * kBlockK;
constexpr int kEndOfWork = -1;
// Copy groups a producer thread keeps in flight before it signals the oldest
// (4 stages, 128 KB an SM, cover L2's latency at the MMA rate). The
// producer signals K block j only after issuing j + kLag, which waits for
// j + kLag - kStages to be released, so kStages >= kLag + 1; the rings keep
// kLag + 2 (a consumer holding two K blocks, as the removed two-accumulator
// form did, deadlocks at kStages = kLag + 1).
constexpr int kLag = 3;
constexpr int kRowsPerPass = kGroupThreads / 8;  // a copy pass: 8 threads a 128-byte row
constexpr int kPasses = kBlockM / kRowsPerPass;  // the same for the A and the (128-row) weight tile
static_assert(kRowsPerPass % 8 == 0, "every pass keeps a thread's swizzle row (row % 8)");

// The ring's shape for kN weight rows a block reads: 128 (64 gate + 64 up
// under swiglu), or the wide tiles' 192 (session 43): each consumer's
// m64nNk32 reads its A rows once for kN columns, so the shared-memory and L2
// bytes a flop go as (64 + kN) / kN (1.50 at 128, 1.33 at 192), for kN / 2
// accumulator registers and as many sum registers a thread. (160 rows, with
// scales in groups of 16, measured no faster than 128: removed, S43-1.)
template <int kN>
struct WsTile {
  static constexpr int kBTileBytes = kN * kBlockK;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;  // 32 or 40 KB
  // A stage's scales, after the stages: each tile row's A scale, then the
  // weight blocks' (one a column group, kFp8ScaleGroups), then the item's
  // tile as two ints (its rows, kEndOfWork after the block's last item; its
  // first slot): the consumers learn their work from the ring, not from
  // global memory.
  static constexpr int kScaleGroups = kFp8ScaleGroups<kN>;
  static constexpr int kTileInfo = kBlockM + kScaleGroups;  // float index of the tile's rows, then its first slot
  static constexpr int kScaleFloats = kTileInfo + 2;
  static_assert(kN == 128 || kN == 192, "tiles of 128 or 192 weight rows");
  static constexpr int kStages = kN == 192 ? 5 : 6;
  static constexpr int kBarrierBytes = 2 * kStages * 8;  // full and empty, a stage
  static constexpr int kSmemBytes =
      kStages * (kStageBytes + kScaleFloats * 4) + kBarrierBytes + 1024;  // + alignment slack
  static_assert(kStages >= kLag + 2, "the consumers must be able to free a stage the producer waits for");
  static_assert(kSmemBytes <= 227 * 1024, "one block an SM");
  static_assert(kScaleGroups <= kGroupThreads, "a producer thread a weight scale");
};
// __launch_bounds__(kThreads, 1) caps every thread at 168 registers (64K /
// 384, rounded down to 8); the block's 64,512 are redistributed. 224 hold
// the 192-column tile's 96 + 96 sums without spills (ptxas, session 43); a
// producer at 40, to give the consumers 232, spilled.
constexpr int kProducerRegisters = 56;
constexpr int kConsumerRegisters = 224;
static_assert(kProducerRegisters * kGroupThreads + kConsumerRegisters * kGroupThreads * kConsumers <=
                  (65536 / kThreads) / 8 * 8 * kThreads,
              "the registers redistributed must fit the block's allocation");

// How the producer moves A and W (the scales always go by cp.async).
enum class WsLoads { cp_async, tma, tma_weight_multicast2 };
// The weight multicast's clusters of two take a pair of tiles at one column block.
template <WsLoads kLoads>
constexpr int kClusterSize = kLoads == WsLoads::tma_weight_multicast2 ? 2 : 1;
template <WsLoads kLoads>
constexpr int kTilesPerItem = kClusterSize<kLoads>;
constexpr std::uint16_t kPairMask = 0b11;  // both blocks of a cluster of two

int g_sm_count = 0;         // prepare_grouped_gemm_fp8_ws()
int g_grid_limit = 0;       // set_grouped_gemm_fp8_ws_grid_limit(); 0: one block an SM
int g_max_pairs = 0;        // clusters of two resident at once (prepare); 0: not known
GroupedGemmFp8BytesProbe g_bytes_probe = GroupedGemmFp8BytesProbe::none;  // benchmarks only
GroupedGemmFp8PathProbe g_path_probe = GroupedGemmFp8PathProbe::none;     // benchmarks only

__device__ __forceinline__ void cp_async_4(float* dst, const float* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}

// A work item's tile: its group (expert), first slot and rows (<= kBlockM);
// group < 0 for tiles past the routing's last.
struct TileWork {
  int group, first_slot, num_rows;
};
__device__ __forceinline__ TileWork tile_work(const GroupedGemmFp8Args& a, int tile) {
  const int group = a.tile_expert[tile];
  if (group < 0) return {group, 0, 0};
  const int first_slot = a.tile_first_slot[tile];
  return {group, first_slot, min(kBlockM, a.expert_offsets[group + 1] - first_slot)};
}

// This block's tile of the work item's tile unit u: tile u, or under weight
// multicast tile 2u + rank of the pair (2u, 2u + 1). group < 0: past the
// plan's last tile (every block of the cluster sees it at the same u and
// stops). shares_weights: the pair is one expert's, each block multicasts
// half the weight tile; otherwise each block loads its own (loads_weights),
// except a lone last tile's partner: the first tile's group with no rows,
// loading nothing.
struct BlockTile {
  TileWork work;
  bool shares_weights, loads_weights;
};
template <WsLoads kLoads>
__device__ __forceinline__ BlockTile block_tile(const GroupedGemmFp8Args& a, int unit, int rank) {
  if constexpr (kTilesPerItem<kLoads> == 1) {
    return {tile_work(a, unit), false, true};
  } else {
    const TileWork first = tile_work(a, 2 * unit);
    if (first.group < 0) return {first, false, false};
    const TileWork second = 2 * unit + 1 < a.max_tiles ? tile_work(a, 2 * unit + 1) : TileWork{-1, 0, 0};
    const bool shares = second.group == first.group;
    if (rank == 0) return {first, shares, true};
    if (second.group < 0) return {{first.group, first.first_slot, 0}, false, false};
    return {second, shares, true};
  }
}

// A's tensor maps (a as [rows, k] bytes, E4m3RowBoxes). A tile copies only
// its rows rounded up to 16 (session 49, tma_load_rows_by_16): an expert's
// last tile holds ~half its 128 rows on average, and the rows past them are
// the next expert's. Measured (S49-1, H100): down's loads 6% faster;
// gate_up's unchanged, since HBM, not these L2 bytes, bounds them. The rows
// not copied are never stored: a row's products depend on that row of A alone.
static_assert(E4m3RowBoxes::kMaxRows == kBlockM && kE4m3RowBoxBytes == kBlockK, "A's boxes are the tile's");
// The A rows a tile of num_rows copies: all kBlockM, or num_rows rounded up to 16.
__device__ __forceinline__ int a_rows_copied(int num_rows) {
  constexpr int kBy = E4m3RowBoxes::kMinRows;
  return min(kBlockM, (num_rows + kBy - 1) / kBy * kBy);
}

// The narrow tail of the wide tiles (session 49): when n leaves 64 weight
// rows to the last column block (gate_up at n = 2048: 32 gate and 32 up
// columns of its 96; down at 7168 or 4096: 64 of 192), that block's items
// copy those rows alone, in two boxes of 32 ([gate | up] under swiglu), and
// issue m64n64 MMAs: a third of a wide item's weight bytes and MMAs, where it
// multiplied rows past n and dropped them.
constexpr int kTailRows = 64;
bool has_narrow_tail(std::int64_t n, bool swiglu, int tile_n) {
  return tile_n == 192 && (swiglu ? n % 96 == kTailRows / 2 : n % 192 == kTailRows);
}

// Work items: (tile unit, column block), the column blocks fastest; a
// cluster takes one item. A tile unit is a tile, or under weight multicast a
// pair of tiles (block_tile). column_items = column blocks.
// maps_a: A's boxes (E4m3RowBoxes); map_w: w as [rows, k], boxes of 128 x
// kN / 2 rows, map_w_tail of kTailRows / 2 (used where narrow_tail). All
// unused under WsLoads::cp_async.
template <bool kSwiglu, WsLoads kLoads, int kN>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_fp8_ws_kernel(GroupedGemmFp8Args a, const __grid_constant__ E4m3RowBoxes maps_a,
                               const __grid_constant__ CUtensorMap map_w,
                               const __grid_constant__ CUtensorMap map_w_tail, bool narrow_tail, int column_items,
                               int num_items, GroupedGemmFp8PathProbe probe) {
  constexpr bool kTma = kLoads != WsLoads::cp_async;
  constexpr int kCluster = kClusterSize<kLoads>;
  using Tile = WsTile<kN>;
  constexpr int kBTileBytes = Tile::kBTileBytes, kStageBytes = Tile::kStageBytes, kStages = Tile::kStages;
  constexpr int kScaleFloats = Tile::kScaleFloats, kTileInfo = Tile::kTileInfo, kScaleGroups = Tile::kScaleGroups;
  static_assert(kTma || kN == kBlockM, "cp.async copies weight tiles of kBlockM rows");
  extern __shared__ unsigned char smem_window[];
  pdl_launch_dependents();
  pdl_wait();
  const AlignedSmem smem = align_smem_1024(smem_window);
  float* const scales_s = reinterpret_cast<float*>(smem.ptr + kStages * kStageBytes);
  const std::uint32_t barriers = smem.addr + kStages * (kStageBytes + kScaleFloats * 4);
  auto full = [&](int stage) { return barriers + 8 * stage; };
  auto empty = [&](int stage) { return barriers + 8 * (kStages + stage); };

  const int tid = threadIdx.x;
  // Through a shuffle so the compiler knows it is uniform across the warp.
  const int warpgroup = __shfl_sync(0xffffffffu, tid / kGroupThreads, 0);
  const int group_tid = tid % kGroupThreads;
  const int rank = kCluster > 1 ? static_cast<int>(cluster_ctarank()) : 0;
  const int first_item = static_cast<int>(blockIdx.x) / kCluster, item_step = static_cast<int>(gridDim.x) / kCluster;
  if (tid == 0) {
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrier_init(full(stage), kGroupThreads);
      mbarrier_init(empty(stage), kConsumers * 4 * kCluster);  // one arrival a consumer warp of the cluster
    }
    if constexpr (kCluster > 1) fence_mbarrier_init_cluster();
  }
  if constexpr (kCluster > 1)
    cluster_sync();
  else
    __syncthreads();

  const std::int64_t n = a.n, k = a.k;
  const int num_k_blocks = static_cast<int>(k / kBlockK);
  const std::int64_t group_rows = kSwiglu ? 2 * n : n;
  // Output columns [n0, n0 + kN / 2) of each half under swiglu, [n0, n0 + kN) otherwise.
  const std::int64_t col_width = kSwiglu ? kN / 2 : kN;
  auto item_n0 = [&](int item) {
    return static_cast<std::int64_t>(item % column_items) * col_width;
  };
  // Whether an item is its tile's narrow tail (kTailRows weight rows).
  auto narrow_item = [&](int item) {
    return kN == 192 && narrow_tail && item % column_items == column_items - 1;
  };

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    // cp_async: thread t moves 16-byte chunk t % 8 of rows t / 8 +
    // kRowsPerPass i of both tiles; the swizzle's row term (row % 8) is the
    // same in every pass.
    const int chunk = group_tid & 7, row_base = group_tid >> 3;
    const std::uint32_t dst0 =
        static_cast<std::uint32_t>(row_base * kBlockK + ((chunk ^ (row_base & 7)) << 4));
    const auto* a_q = static_cast<const unsigned char*>(a.a);
    const auto* w_q = static_cast<const unsigned char*>(a.w);
    // A by TMA when its rows are consecutive (thread 0 copies the tile's
    // box); gathered A rows go by cp.async (a TMA copy a 128-byte row costs
    // more than the 16-byte copies; session 12, run 1). W by TMA: thread 0
    // the weight boxes.
    const bool gather = a.row_of_slot != nullptr;
    const bool a_by_tma = kTma && !gather;
    const bool copies = probe != GroupedGemmFp8PathProbe::mmas_only;  // A and W tiles (benchmarks' path probe)
    int g = 0;  // stages filled so far, over all this block's items
    // Waits until stage g's last K block has been released by every consumer it feeds.
    auto wait_empty = [&](int stage) {
      if (g < kStages) return;
      mbarrier_wait(empty(stage), (g / kStages - 1) & 1);
    };
    // When wgmma reads nothing that came by cp.async (A and W by TMA), the
    // scales' copies signal their stage themselves as they land: a stage is
    // full once its bytes are in, not kLag stages of copies later (session
    // 46: the lag tied a stage's signal to the release of an older one).
    // Thread 2 also stores the stage's tile info: its copies hold the phase
    // open and its own arrival publishes the store.
    const bool async_arrivals = a_by_tma;
    auto signal_stage = [&] {
      const std::uint32_t bar = full(g % kStages);
      if (group_tid != 2) {
        cp_async_mbarrier_arrive_noinc(bar);
      } else {
        cp_async_mbarrier_arrive(bar);
        mbarrier_arrive(bar);
      }
      ++g;
    };
    // Commits this thread's copies of stage g and signals stage g - kLag,
    // whose copies have landed.
    auto commit_stage = [&] {
      if (async_arrivals) return signal_stage();
      cp_async_commit();
      if (g >= kLag) {
        cp_async_wait<kLag>();
        fence_proxy_async();
        mbarrier_arrive(full((g - kLag) % kStages));
      }
      ++g;
    };
    for (int item = first_item; item < num_items; item += item_step) {
      const BlockTile tile = block_tile<kLoads>(a, item / column_items, rank);
      const TileWork w = tile.work;
      if (w.group < 0) break;  // the plan's unused tiles are the last ones
      const std::int64_t n0 = item_n0(item);
      int a_row[kPasses];  // A by cp.async: -1 past the group's end: those A rows are left as they are (never stored)
      if (!a_by_tma) {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int r = row_base + kRowsPerPass * i;
          a_row[i] = r < w.num_rows ? (gather ? a.row_of_slot[w.first_slot + r] : w.first_slot + r) : -1;
        }
      }
      // A tile without rows copies no A.
      const bool a_box = a_by_tma && w.num_rows > 0 && copies;
      const int a_rows = a_box ? a_rows_copied(w.num_rows) : 0;
      const bool w_boxes = tile.loads_weights && copies;
      const bool narrow = narrow_item(item);
      const int w_bytes = narrow ? kTailRows * kBlockK : kBTileBytes;
      const std::uint32_t tx_bytes = static_cast<std::uint32_t>(a_rows * kBlockK + (w_boxes ? w_bytes : 0));
      // This thread copies tile row group_tid's A scale (rows past the end: row 0's, never used).
      const int scale_slot = w.first_slot + (group_tid < w.num_rows ? group_tid : 0);
      const float* a_scale_src = a.a_scales + (gather ? a.row_of_slot[scale_slot] : scale_slot);
      const std::int64_t w_row0 = w.group * group_rows + n0;  // first weight row (of the gate half)
      const std::int64_t w_row1 = w_row0 + n;                 // first weight row of the up half
      // Thread g < kScaleGroups copies column group g's weight scale (gate
      // groups, then up groups under swiglu): the 128-row block of the
      // group's first weight row, held within this expert's half (a wide
      // tile's last column block may pass n: those columns are never stored).
      const float* w_scale_src = nullptr;
      if (group_tid < kScaleGroups) {
        constexpr int kGroupsPerHalf = kSwiglu ? kScaleGroups / 2 : kScaleGroups;
        const bool up = group_tid >= kGroupsPerHalf;
        const std::int64_t half_last = w.group * group_rows + (up ? 2 * n : n) - 1;
        const std::int64_t row = (up ? w_row1 : w_row0) + (group_tid % kGroupsPerHalf) * kFp8ScaleGroupCols<kN>;
        w_scale_src = a.w_scales + ((row < half_last ? row : half_last) / kBlockK) * a.w_scale_row_stride;
      }
      // Pass i's weight row: under swiglu passes [0, kPasses / 2) are gate rows, the rest up rows.
      const unsigned char* w_gate = w_q + (w_row0 + row_base) * k + chunk * 16;
      const unsigned char* w_up = w_q + (w_row1 + row_base) * k + chunk * 16;
      for (int kb = 0; kb < num_k_blocks; ++kb) {
        const int stage = g % kStages;
        wait_empty(stage);
        unsigned char* a_s = smem.ptr + stage * kStageBytes;
        unsigned char* b_s = a_s + kATileBytes;
        float* stage_scales = scales_s + stage * kScaleFloats;
        const std::int64_t k0 = static_cast<std::int64_t>(kb) * kBlockK;
        cp_async_4(stage_scales + group_tid, a_scale_src + static_cast<std::int64_t>(kb) * a.a_scale_stride);
        if (w_scale_src != nullptr) cp_async_4(stage_scales + kBlockM + group_tid, w_scale_src + kb);
        if (group_tid == 2) {
          reinterpret_cast<int*>(stage_scales)[kTileInfo] = w.num_rows;
          reinterpret_cast<int*>(stage_scales)[kTileInfo + 1] = w.first_slot;
        }
        const std::uint32_t a_addr = smem.addr + stage * kStageBytes, b_addr = a_addr + kATileBytes;
        const std::uint32_t bar = full(stage);
        // Before this thread's lagged arrival: the phase cannot complete
        // without it, whenever the copies' bytes land (a peer's multicast
        // may land first: the count dips below zero, the arrivals still hold
        // the phase).
        if (kTma && group_tid == 0) mbarrier_expect_tx(bar, tx_bytes);
        if (a_by_tma) {
          if (a_box && group_tid == 0) tma_load_rows_by_16(a_addr, maps_a, static_cast<int>(k0), w.first_slot, a_rows, bar);
        } else if (copies) {
#pragma unroll
          for (int i = 0; i < kPasses; ++i)
            if (a_row[i] >= 0)
              cp_async_16(a_s + dst0 + i * kRowsPerPass * kBlockK,
                          a_q + static_cast<std::int64_t>(a_row[i]) * k + chunk * 16 + k0, true);
        }
        if constexpr (kTma) {
          // The weight tile's two boxes of kN / 2 rows (kTailRows / 2 in a
          // narrow tail): the gate and up halves under swiglu.
          const CUtensorMap* w_map = narrow ? &map_w_tail : &map_w;
          const int box_rows = narrow ? kTailRows / 2 : kN / 2;
          const int w_box0 = static_cast<int>(w_row0);
          const int w_box1 = static_cast<int>(kSwiglu ? w_row1 : w_row0 + box_rows);
          if (group_tid == 0 && tile.shares_weights && copies) {
            // Box `rank` into both blocks of the cluster, at the same offsets.
            tma_load_2d_multicast(b_addr + rank * box_rows * kBlockK, w_map, static_cast<int>(k0),
                                  rank == 0 ? w_box0 : w_box1, bar, kPairMask);
          } else if (group_tid == 0 && w_boxes) {
            tma_load_2d(b_addr, w_map, static_cast<int>(k0), w_box0, bar);
            tma_load_2d(b_addr + box_rows * kBlockK, w_map, static_cast<int>(k0), w_box1, bar);
          }
        } else if (copies) {
#pragma unroll
          for (int i = 0; i < kPasses; ++i) {
            const unsigned char* src = kSwiglu && i >= kPasses / 2 ? w_up + (i - kPasses / 2) * kRowsPerPass * k
                                                                   : w_gate + i * kRowsPerPass * k;
            cp_async_16(b_s + dst0 + i * kRowsPerPass * kBlockK, src + k0, true);
          }
        }
        commit_stage();
      }
    }
    // One more stage, holding no data: the end of this block's work.
    const int stage = g % kStages;
    wait_empty(stage);
    if (group_tid == 2) reinterpret_cast<int*>(scales_s + stage * kScaleFloats)[kTileInfo] = kEndOfWork;
    if (async_arrivals) {
      mbarrier_arrive(full(stage));
      cp_async_wait<0>();
    } else {
      commit_stage();
      // The last (up to kLag) stages still in flight.
      cp_async_wait<0>();
      fence_proxy_async();
      for (int j = max(g - kLag, 0); j < g; ++j) mbarrier_arrive(full(j % kStages));
    }
    // No block of the cluster leaves while another may still signal its barriers.
    if constexpr (kCluster > 1) cluster_sync();
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  const int consumer = warpgroup - 1;
  const int lane = tid & 31, warp_in_group = group_tid >> 5;
  // This thread's two accumulator rows (of the tile's 128).
  const int row_lo = consumer * 64 + warp_in_group * 16 + lane / 4, row_hi = row_lo + 8;
  auto* out = static_cast<__nv_bfloat16*>(a.out);
  const int col_in_chunk = (lane % 4) * 2;
  // This warp is done with the stage (its MMAs and scale reads): one arrival
  // on `empty` of every block whose producer fills it.
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) {
      if constexpr (kCluster > 1) {
#pragma unroll
        for (int q = 0; q < kCluster; ++q) mbarrier_arrive_cluster(empty(stage), static_cast<std::uint32_t>(q));
      } else {
        mbarrier_arrive(empty(stage));
      }
    }
  };
  // The ring position of the next K block: its stage and the parity of that
  // stage's phase, advanced by one a K block over all of this block's items
  // (no division by kStages on the path between one K block's MMAs and the
  // next's: session 46 counted ~45 of the loop's ~190 instructions a K block
  // in index and descriptor arithmetic).
  int stage = 0;
  std::uint32_t phase = 0;
  auto advance = [&] {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  };
  // Stage 0's descriptors of this consumer's 64 A rows and of the weight
  // tile. A stage lies kStageBytes further and a k32 step 32 bytes: both add
  // to the descriptor's start-address field (address / 16), which holds any
  // shared-memory address, so the sums never carry out of it.
  const std::uint64_t desc_a0 = smem_desc(smem.addr + consumer * 64 * kBlockK, 16, 1024);
  const std::uint64_t desc_b0 = smem_desc(smem.addr + kATileBytes, 16, 1024);
  constexpr std::uint64_t kStageDesc = kStageBytes >> 4, kStepDesc = 32 >> 4;
  for (int item = first_item;; item += item_step) {
    // The item's tile, from its first stage (the producer's end mark after the last).
    mbarrier_wait(full(stage), phase);
    const int* tile_info = reinterpret_cast<const int*>(scales_s + stage * kScaleFloats) + kTileInfo;
    const int num_rows = tile_info[0], first_slot = tile_info[1];
    if (num_rows == kEndOfWork) break;
    const std::int64_t n0 = item_n0(item);
    // A consumer whose 64 rows hold no slot skips its MMAs (an expert's spill
    // tile of a few rows costs one warpgroup) but still takes part in the ring.
    const bool active = num_rows > consumer * 64 && probe != GroupedGemmFp8PathProbe::loads_only;
    if (!active) {
      // Keep the ring's phases: wait for each stage, release it.
      for (int kb = 0; kb < num_k_blocks; ++kb, advance()) {
        mbarrier_wait(full(stage), phase);
        release(stage);
      }
      continue;
    }
    // The item's K blocks on an m64 x kCols tile: kN columns, or a narrow tail's kTailRows.
    auto run_item = [&](auto cols) {
      constexpr int kCols = decltype(cols)::value;
      constexpr int kAcc = kCols / 2;  // accumulator registers a thread
      float total[kAcc];
#pragma unroll
      for (int i = 0; i < kAcc; ++i) total[i] = 0.0f;
      float acc[kAcc];
      for (int kb = 0; kb < num_k_blocks; ++kb, advance()) {
        // Wait until the stage has landed, issue its four MMAs.
        mbarrier_wait(full(stage), phase);
        const std::uint64_t desc_a = desc_a0 + stage * kStageDesc, desc_b = desc_b0 + stage * kStageDesc;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kBlockK / 32; ++ks)
          wgmma_m64nNk32_e4m3<kCols>(acc, desc_a + ks * kStepDesc, desc_b + ks * kStepDesc, ks > 0);
        wgmma_commit();
        // The stage's scales, read while the MMAs run; a narrow tail's two
        // groups are the wide tile's first gate and first up group (its
        // first two under store).
        const float* stage_scales = scales_s + stage * kScaleFloats;
        const float a_lo = stage_scales[row_lo], a_hi = stage_scales[row_hi];
        float w[kFp8ScaleGroups<kCols>];
        if constexpr (kCols == kN) {
#pragma unroll
          for (int i = 0; i < kScaleGroups; ++i) w[i] = stage_scales[kBlockM + i];
        } else {
          w[0] = stage_scales[kBlockM];
          w[1] = stage_scales[kBlockM + (kSwiglu ? kScaleGroups / 2 : 1)];
        }
        wgmma_wait<0>();
        fence_registers(acc);
        release(stage);
        promote_fp8_k_block<kCols>(total, acc, a_lo, a_hi, w);
      }
      store_fp8_tile_rows<kSwiglu, kCols>(total, row_lo, row_hi, num_rows, first_slot, n0, col_in_chunk, n, out);
    };
    if constexpr (kN == 192) {
      if (narrow_item(item)) {
        run_item(std::integral_constant<int, kTailRows>{});
        continue;
      }
    }
    run_item(std::integral_constant<int, kN>{});
  }
  if constexpr (kCluster > 1) cluster_sync();
}

// Column blocks of a kN-row weight tile over n output columns (the wide
// tiles' last one may pass n).
std::int64_t column_blocks(std::int64_t n, bool swiglu, int tile_n) {
  const std::int64_t width = swiglu ? tile_n / 2 : tile_n;
  return (n + width - 1) / width;
}

template <bool kSwiglu, WsLoads kLoads, int kN = 128>
void launch_variant(const GroupedGemmFp8Args& a, const Launch& launch) {
  constexpr int kCluster = kClusterSize<kLoads>;
  const std::int64_t column_items = column_blocks(a.n, kSwiglu, kN);
  const std::int64_t tile_units = (a.max_tiles + kTilesPerItem<kLoads> - 1) / kTilesPerItem<kLoads>;
  const std::int64_t items = column_items * tile_units;
  SLUICE_CHECK_MSG(items < (std::int64_t{1} << 31), "grouped FP8 GEMM: too many work items");
  int blocks = g_grid_limit > 0 ? g_grid_limit : g_sm_count;
  if (blocks <= 0) {  // not prepared (a test calling the launcher alone)
    int device = 0;
    SLUICE_CUDA_CHECK(cudaGetDevice(&device));
    SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, device));
  }
  // Clusters: as many as are resident at once (SMs left out of GPCs of sizes not a multiple), whole.
  if (kCluster > 1 && g_grid_limit == 0 && g_max_pairs > 0) blocks = g_max_pairs * kCluster;
  const std::int64_t clusters = std::max<std::int64_t>(1, std::min<std::int64_t>(blocks / kCluster, items));
  E4m3RowBoxes maps_a{};
  CUtensorMap map_w{}, map_w_tail{};
  const bool narrow_tail = kLoads != WsLoads::cp_async && has_narrow_tail(a.n, kSwiglu, kN);
  if constexpr (kLoads != WsLoads::cp_async) {
    SLUICE_CHECK(a.w_rows > 0 && a.a_scale_stride > 0);
    const bool probe_w = g_bytes_probe == GroupedGemmFp8BytesProbe::one_expert_weights ||
                         g_bytes_probe == GroupedGemmFp8BytesProbe::both;
    const bool probe_a =
        g_bytes_probe == GroupedGemmFp8BytesProbe::one_tile_a || g_bytes_probe == GroupedGemmFp8BytesProbe::both;
    const std::int64_t group_rows = kSwiglu ? 2 * a.n : a.n;
    const std::int64_t a_rows = probe_a ? std::min<std::int64_t>(kBlockM, a.a_scale_stride) : a.a_scale_stride;
    maps_a = e4m3_row_boxes(a.a, a_rows, a.k, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
    const std::int64_t w_rows = probe_w ? std::min(group_rows, a.w_rows) : a.w_rows;
    map_w = e4m3_rows_tensor_map(a.w, w_rows, a.k, kN / 2, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    if (narrow_tail)
      map_w_tail = e4m3_rows_tensor_map(a.w, w_rows, a.k, kTailRows / 2, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  }
  cudaLaunchAttribute attributes[2];
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = launch.programmatic ? 1 : 0;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = kCluster;
  attributes[1].val.clusterDim.y = 1;
  attributes[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(clusters * kCluster));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = WsTile<kN>::kSmemBytes;
  config.stream = launch.stream;
  config.attrs = attributes;
  config.numAttrs = kCluster > 1 ? 2 : 1;
  SLUICE_CUDA_CHECK(cudaLaunchKernelEx(&config, grouped_gemm_fp8_ws_kernel<kSwiglu, kLoads, kN>, a, maps_a,
                                       map_w, map_w_tail, narrow_tail, static_cast<int>(column_items),
                                       static_cast<int>(items), g_path_probe));
  SLUICE_CUDA_CHECK_LAUNCH();
}

template <bool kSwiglu, WsLoads kLoads, int kN = 128>
void raise_smem_limit() {
  SLUICE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_fp8_ws_kernel<kSwiglu, kLoads, kN>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, WsTile<kN>::kSmemBytes));
}

template <WsLoads kLoads, int kN = 128>
void raise_smem_limits() {
  raise_smem_limit<false, kLoads, kN>();
  raise_smem_limit<true, kLoads, kN>();
}

// How many clusters of two of this kernel fit on the device at once.
template <WsLoads kLoads>
int max_active_clusters() {
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = kClusterSize<kLoads>;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(kClusterSize<kLoads> * g_sm_count));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = WsTile<128>::kSmemBytes;
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  SLUICE_CUDA_CHECK(
      cudaOccupancyMaxActiveClusters(&clusters, grouped_gemm_fp8_ws_kernel<true, kLoads, 128>, &config));
  return clusters;
}

}  // namespace

void set_grouped_gemm_fp8_ws_grid_limit(int blocks) { g_grid_limit = std::max(blocks, 0); }
int grouped_gemm_fp8_ws_grid_limit() { return g_grid_limit; }
void set_grouped_gemm_fp8_ws_bytes_probe(GroupedGemmFp8BytesProbe probe) { g_bytes_probe = probe; }
void set_grouped_gemm_fp8_ws_path_probe(GroupedGemmFp8PathProbe probe) { g_path_probe = probe; }

void prepare_grouped_gemm_fp8_ws() {
  raise_smem_limits<WsLoads::cp_async>();
  raise_smem_limits<WsLoads::tma>();
  raise_smem_limits<WsLoads::tma_weight_multicast2>();
  raise_smem_limits<WsLoads::tma_weight_multicast2, 192>();
  int device = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&device));
  SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&g_sm_count, cudaDevAttrMultiProcessorCount, device));
  encode_tensor_map();  // the driver's entry point, looked up before any step needs it
  // The 192-row tiles' too: the same block size and cluster, no more shared memory an SM.
  g_max_pairs = max_active_clusters<WsLoads::tma_weight_multicast2>();
}

bool grouped_gemm_fp8_ws_supports(GroupedGemmFp8Kernel kernel, const GroupedGemmFp8Args& a) {
  const bool swiglu = a.epilogue == GroupedEpilogue::swiglu;
  return kernel != GroupedGemmFp8Kernel::ring && kernel != GroupedGemmFp8Kernel::swap_ab && a.tile_rows == kBlockM &&
         a.n % (swiglu ? 64 : 128) == 0;
}

void launch_grouped_gemm_fp8_ws(const GroupedGemmFp8Args& a, GroupedGemmFp8Kernel kernel, const Launch& launch) {
  SLUICE_CHECK_MSG(grouped_gemm_fp8_ws_supports(kernel, a),
                   "launch_grouped_gemm_fp8_ws: 128-slot tiles, n a multiple of 64 (swiglu) or 128; the ring kernel is "
                   "grouped_gemm_fp8.cu's");
  if (a.max_tiles == 0) return;
  const bool swiglu = a.epilogue == GroupedEpilogue::swiglu;
  switch (kernel) {
    case GroupedGemmFp8Kernel::warp_specialized:
      swiglu ? launch_variant<true, WsLoads::cp_async>(a, launch) : launch_variant<false, WsLoads::cp_async>(a, launch);
      return;
    case GroupedGemmFp8Kernel::tma:
      swiglu ? launch_variant<true, WsLoads::tma>(a, launch) : launch_variant<false, WsLoads::tma>(a, launch);
      return;
    case GroupedGemmFp8Kernel::tma_weight_multicast:
      swiglu ? launch_variant<true, WsLoads::tma_weight_multicast2>(a, launch)
             : launch_variant<false, WsLoads::tma_weight_multicast2>(a, launch);
      return;
    case GroupedGemmFp8Kernel::tma_weight_multicast_n192:
      swiglu ? launch_variant<true, WsLoads::tma_weight_multicast2, 192>(a, launch)
             : launch_variant<false, WsLoads::tma_weight_multicast2, 192>(a, launch);
      return;
    case GroupedGemmFp8Kernel::swap_ab:
    case GroupedGemmFp8Kernel::ring: break;
  }
}

}  // namespace sluice::cuda
