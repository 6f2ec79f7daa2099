// The lightning indexer's FP8 scores on warpgroup MMA (launch_v4_indexer_scores_wgmma,
// deepseek_v4_kernels.h), for prefill: many query rows of one sequence score
// the same keys, so a block holds a tile of 256 keys and runs many of the
// sequence's query rows over it.
//
// The keys are wgmma's A (M: 64 keys a tile, two tiles a warpgroup, two
// warpgroups), a row's index heads its B (N: 64 heads), the 128 index dims
// its K (four k32 steps); both e4m3, K-major, in the 128-byte swizzle (a
// record's 128 codes are one line). The keys stay in registers as A
// fragments for all of a block's rows. So the accumulator holds, for each of
// a thread's 4 keys, 16 of the row's heads: relu and the head factors are
// summed in registers, then over the 4 lanes that share the keys.
//
// Warp specialised and persistent. Session 22's kernel met at a block barrier
// every 4 rows, and with 205 registers a thread one block fills a
// multiprocessor, so every barrier drained the tensor cores (ncu: tensor pipe
// 34%, "wait" the top stall). Here a producer warpgroup feeds the two
// consumer warpgroups through a ring of query slots with mbarriers, and the
// consumers never meet:
//   producer  (its registers given to the consumers) walks the block's work
//             items (256 keys x 128 rows, keys fastest), finds each item's runs
//             of rows sharing a sequence, and for each run that sees the
//             item's keys (an epoch) copies the key tile with the run's first
//             row, then one row a slot: queries, head factors and the slot's
//             SlotInfo. An epoch's slots are padded to a multiple of
//             kGroupRows (padding slots: row -1, their queries stale, their
//             scores dropped). It signals slot j's `full` once slot j + kLag
//             is issued (the grouped GEMM's protocol, grouped_gemm_fp8_ws.cu),
//             and all of them before it waits for the key tile to be free.
//   consumers take the slots in order, two rows in flight a warpgroup: at an
//             epoch's first slot they load their key fragments (then free the
//             key tile), then row j + 1's MMAs run while row j's epilogue
//             does, in groups of kGroupRows drained at their end: ptxas
//             serializes every wgmma of a loop whose back edge has one in
//             flight (C7514). The two warpgroups never meet, so one's drain
//             runs under the other's MMAs.
// A row's fixed work is a large part of its epilogue (session 23: four
// consumer warpgroups of one tile each ran 34% slower), so it is kept small:
// the head factors come premultiplied (q_scale x weights), the B descriptors
// are one add from a base, and the 4 key sums reduce in 3 shuffles with each
// lane storing one of them.
//
// launch_v4_indexer_scores_wgmma_tf32 (session 26) sums the heads on the
// tensor cores instead: relu in place, then wgmma m64n8k8 in tf32 with the
// score accumulator as A (its registers already are tf32 A fragments, heads
// in a permuted order the B tile repeats) and the row's head factors as B.
// With two consumer warpgroups it measured equal to the FMAs (5.04-5.23
// against 5.11-5.15 ms at 8192 x 32k): the epilogue's issue was not the bound;
// ncu showed one warp a scheduler a warpgroup, mostly waiting. Its keys in
// shared memory and one accumulator leave room for a third warpgroup
// (BlockShape): 4.80-4.85 against 5.11-5.14 ms (S26-5), 4% slower on
// 1024-row chunks. Opt-in (coarser sums). Its form with the keys back in
// registers (HeadSum::tf32_register_keys, session 27: four consumer
// warpgroups of one 64-key tile) halves the shared-memory bytes an MMA
// reads, which with both operands in shared memory equal what the SM
// delivers in the MMA's time; built, not yet run on a device.
//
// Precision: the products of two e4m3 codes are exact, but Hopper's FP8 MMA
// sums them with a narrower accumulator than f32 (DeepSeek-V3's report puts
// it near 14 bits), so scores differ from the f32 kernels by up to about
// 2^-13 of the sum of the absolute products; the test bounds it that way.
// DeepSeek's own indexer kernels score on FP8 tensor cores too.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/backend/cuda/kernels/mbarrier.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kDim = kV4IndexHeadDim;  // 128 codes: one swizzled line a record
constexpr int kHeads = kV4MaxIndexHeads;
static_assert(kDim == 128 && kHeads == 64, "one 128-byte line a record, N = 64 heads");
constexpr int kTileKeys = 64;                               // wgmma's M
constexpr int kQStageBytes = kHeads * kDim;                 // 8 KB: a row's queries
constexpr int kProducerThreads = 128;  // a warpgroup: setmaxnreg works on whole warpgroups
constexpr int kSlots = 8;
constexpr int kLag = 2;
// The consumers hold at most two slots while they wait for the next; the
// producer waits for slot g - kSlots with g - kLag signalled.
static_assert(kSlots >= kLag + 3, "the consumers must be able to free the slot the producer waits for");
constexpr int kItemRows = 128;
constexpr int kGroupRows = 8;
static_assert(kItemRows % kGroupRows == 0, "a single-sequence item needs no padding");
constexpr int kPaddingRow = -1;
constexpr int kEndOfWork = -2;
struct SlotInfo {
  int row;         // the query row, kPaddingRow, or kEndOfWork
  int visible;     // the row's visible keys
  int epoch_rows;  // at an epoch's first slot: its slots (a multiple of kGroupRows)
  int t0;          // the item's first key
};
// The tf32 head sum's B operand a slot: the row's head factors as [8 columns,
// all equal][64 heads] in tf32, K-major without swizzle, a k8 step two 8 x 16 B
// core matrices (heads 8j + 2i in the first, 8j + 2i + 1 in the second: the
// order the score accumulator holds them as A fragments, so no register moves).
constexpr int kCoreBytes = 128;
constexpr int kHeadSumStepBytes = 2 * kCoreBytes;
constexpr int kHeadSumBBytes = kHeads / 8 * kHeadSumStepBytes;  // 2 KB

// How a block sums the heads and where its consumers read the keys from.
//   fma: two consumer warpgroups of two M tiles (128 keys) each, the keys as
//     A fragments in registers, an FMA a head and key; two accumulators
//     (~180 registers, given by the producer through setmaxnreg).
//   tf32_shared_keys: the sum on a tf32 MMA; the keys stay in shared memory
//     and one accumulator suffices (~100 registers), so three consumer
//     warpgroups of two tiles fit and hide each other's MMA latency (ncu,
//     S26-4: one warp a scheduler a warpgroup, 71% of cycles with none
//     eligible).
//   tf32_register_keys: the tf32 sum with the keys as A fragments again, four
//     consumer warpgroups of one tile. A shared-memory m64n64k32 reads 4 KB
//     (keys and queries) in the 32 cycles its MMA takes, which is all of
//     shared memory's 128 B a cycle; from registers it reads the queries'
//     2 KB. Same MMA work a key; the key tile is free once the fragments are
//     loaded, as for fma.
//   tf32_register_key_pairs: the tf32 sum with the keys as A fragments in
//     three consumer warpgroups of two tiles (384 keys a block, as
//     tf32_shared_keys): the MMAs read only the queries from shared memory,
//     and a row's fixed work is spread over two tiles, not one as in
//     tf32_register_keys (which ran ~20% slower than the shared keys, S27).
//   (Session 37 also tried two variants of tf32_register_key_pairs: the
//   second tile's head sum on FMAs, 2-5% slower, and the two tiles' head-sum
//   MMAs issued in turn in one group, 2% faster at 8,192 rows but slower at
//   1,024-4,096 and in the layer; S37-2, S37-3. Neither was kept.)
//   (A fifth form, three consumer warpgroups of one 64-key tile with two
//   score accumulators, row i + 1's MMAs issued before row i's relu and head
//   sum, put the indexer at 30.3-30.8% of the CSA layer against 23.9-24.2%
//   for tf32_register_key_pairs in three H100 runs, S39-1, S40-1, S44-1: it
//   was removed in session 44.)
enum class HeadSum { fma, tf32_shared_keys, tf32_register_keys, tf32_register_key_pairs };

template <HeadSum kSum>
struct BlockShape {
  static constexpr bool kTf32 = kSum != HeadSum::fma;
  static constexpr bool kKeysInRegisters = kSum != HeadSum::tf32_shared_keys;
  static constexpr int kTiles = kSum == HeadSum::tf32_register_keys ? 1 : 2;  // M tiles a warpgroup
  static constexpr int kGroupKeys = kTiles * kTileKeys;                        // a warpgroup's keys
  static constexpr int kConsumerGroups = kSum == HeadSum::fma ? 2 : kSum == HeadSum::tf32_register_keys ? 4 : 3;
  static constexpr int kBlockKeys = kConsumerGroups * kGroupKeys;  // 256, 384, 256, 384
  static constexpr int kKeyTileBytes = kBlockKeys * kDim;          // 32, 48, 32, 48 KB
  static constexpr int kConsumerThreads = kConsumerGroups * 128;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  // setmaxnreg moves registers within the block's launch allocation (65536 /
  // threads, rounded down to 8, a thread): fma, the producer's 128 threads
  // give 112 each to the 256 consumers; tf32_shared_keys, 64 each to the
  // 384; tf32_register_keys, 32 each to the 512 (ptxas compiles every thread
  // to the launch allocation, 96, so that is the consumers' real budget).
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegisters = kTf32 ? 64 : 56;  // tf32: it also writes the B operands
  static constexpr int kConsumerRegisters =
      kSum == HeadSum::fma ? 224 : kSum == HeadSum::tf32_register_keys ? 104 : 144;
  static_assert(kProducerRegisters * kProducerThreads + kConsumerRegisters * kConsumerThreads <=
                    kLaunchRegisters * kThreads,
                "the consumers can only take what the producer gives back (else setmaxnreg.inc waits forever)");
  static constexpr int kSmemBytes = 1024 + kKeyTileBytes + kSlots * kQStageBytes + kBlockKeys * 4 +
                                    kSlots * kHeads * 4 + kSlots * static_cast<int>(sizeof(SlotInfo)) +
                                    (2 * kSlots + 1) * 8 + (kTf32 ? 16 + kSlots * kHeadSumBBytes : 0);
  static_assert(kSmemBytes <= 227 * 1024, "one block an SM: Hopper's opt-in shared memory");
};

int g_grid_limit = 0;  // set_v4_indexer_scores_wgmma_grid_limit(); 0: one block a multiprocessor
V4IndexerTf32Keys g_tf32_keys = V4IndexerTf32Keys::registers_in_pairs;  // set_v4_indexer_scores_tf32_keys()

// Copies `lines` 128-byte records from src (line i at src + i * 128; lines
// from `valid` on are zeros) into a swizzled tile: producer thread p moves
// chunk p % 8 of lines p / 8 + 16 i.
__device__ __forceinline__ void copy_lines(unsigned char* tile, const std::uint8_t* src, int lines, int valid, int p) {
  const int chunk = p & 7;
  for (int line = p >> 3; line < lines; line += kProducerThreads / 8) {
    const bool ok = line < valid;
    cp_async_16(tile + line * kDim + ((chunk ^ (line & 7)) << 4),
                ok ? src + static_cast<std::int64_t>(line) * kDim + chunk * 16 : src, ok);
  }
}

// The tf32 forms sum the heads' relu'd scores by a second MMA (tf32, m64n8k8,
// the score accumulator as its A) instead of an FMA a head and key.
template <HeadSum kSum>
__global__ void __launch_bounds__(BlockShape<kSum>::kThreads, 1)
    v4_indexer_scores_wgmma_kernel(V4IndexerArgs args, int key_blocks, int num_items) {
  using Shape = BlockShape<kSum>;
  constexpr bool kTf32HeadSum = Shape::kTf32, kKeysInRegisters = Shape::kKeysInRegisters;
  constexpr int kTiles = Shape::kTiles, kGroupKeys = Shape::kGroupKeys;
  constexpr int kBlockKeys = Shape::kBlockKeys, kKeyTileBytes = Shape::kKeyTileBytes;
  constexpr int kConsumerThreads = Shape::kConsumerThreads;
  extern __shared__ unsigned char smem_window[];
  const AlignedSmem smem = align_smem_1024(smem_window);
  unsigned char* const key_tile = smem.ptr;
  auto q_slot = [&](int slot) { return key_tile + kKeyTileBytes + slot * kQStageBytes; };
  float* const key_scales = reinterpret_cast<float*>(key_tile + kKeyTileBytes + kSlots * kQStageBytes);  // [256]
  float* const factors = key_scales + kBlockKeys;  // [slot][kHeads]: q_scale x weights (0 past num_heads)
  SlotInfo* const infos = reinterpret_cast<SlotInfo*>(factors + kSlots * kHeads);
  const std::uint32_t barriers = smem_addr(infos + kSlots);
  auto full = [&](int slot) { return barriers + 8 * slot; };
  auto empty = [&](int slot) { return barriers + 8 * (kSlots + slot); };
  const std::uint32_t key_empty = barriers + 8 * (2 * kSlots);
  // (tf32) the slots' B operands, after the barriers, 16-byte aligned.
  unsigned char* const head_sum_b =
      key_tile + ((reinterpret_cast<unsigned char*>(infos + kSlots) + (2 * kSlots + 1) * 8 - key_tile + 15) & ~15);
  constexpr int kConsumerWarps = kConsumerThreads / 32;
  if (threadIdx.x == 0) {
    for (int slot = 0; slot < kSlots; ++slot) {
      mbarrier_init(full(slot), kProducerThreads);
      mbarrier_init(empty(slot), kConsumerWarps);
    }
    mbarrier_init(key_empty, kConsumerWarps);
  }
  __syncthreads();
  const int heads = args.num_heads;
  const int lane = threadIdx.x & 31;

  if (threadIdx.x >= kConsumerThreads) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Shape::kProducerRegisters));
    const int p = threadIdx.x - kConsumerThreads;
    int g = 0, signalled = 0, epoch = 0;
    auto commit_slot = [&] {
      cp_async_commit();
      ++g;
      if (g - signalled > kLag) {
        cp_async_wait<kLag>();
        fence_proxy_async();
        mbarrier_arrive(full(signalled % kSlots));
        ++signalled;
      }
    };
    auto signal_all = [&] {
      cp_async_wait<0>();
      fence_proxy_async();
      for (; signalled < g; ++signalled) mbarrier_arrive(full(signalled % kSlots));
    };
    auto next_slot = [&] {
      const int slot = g % kSlots;
      if (g >= kSlots) mbarrier_wait(empty(slot), ((g / kSlots) - 1) & 1);
      return slot;
    };
    for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
      const int t0 = (item % key_blocks) * kBlockKeys;
      const int row0 = (item / key_blocks) * kItemRows;
      const int row_end = min(row0 + kItemRows, args.rows);
      for (int run = row0; run < row_end;) {
        // The run of rows from `run` that share its sequence, 32 at a time (each warp alike).
        const int begin = args.key_begin[run];
        int run_end = run, count = 0;
        for (;;) {
          const int r = run_end + lane;
          const bool same = r < row_end && args.key_begin[r] == begin;
          const unsigned mask = __ballot_sync(0xffffffffu, same);
          const int taken = mask == 0xffffffffu ? 32 : __ffs(~mask) - 1;
          const int visible = lane < taken ? args.num_visible[r] : 0;
          count = max(count, static_cast<int>(__reduce_max_sync(0xffffffffu, static_cast<unsigned>(visible))));
          run_end += taken;
          if (taken < 32) break;
        }
        if (count > t0) {
          // An epoch: the key tile is free once every consumer warp loaded the last one's fragments.
          if (epoch > 0) {
            signal_all();
            mbarrier_wait(key_empty, (epoch - 1) & 1);
          }
          const int rows = run_end - run, slots = (rows + kGroupRows - 1) / kGroupRows * kGroupRows;
          for (int j = 0; j < slots; ++j) {
            const int slot = next_slot();
            if (j == 0) {
              copy_lines(key_tile, args.keys + (static_cast<std::int64_t>(begin) + t0) * kDim, kBlockKeys, count - t0,
                         p);
              for (int i = p; i < kBlockKeys; i += kProducerThreads) {
                const bool valid = t0 + i < count;
                cp_async_4(key_scales + i, args.key_scale + (valid ? begin + t0 + i : 0), valid);
              }
            }
            const int row = j < rows ? run + j : kPaddingRow;
            if (row >= 0) {
              copy_lines(q_slot(slot), args.q + static_cast<std::int64_t>(row) * heads * kDim, kHeads, heads, p);
              if constexpr (kTf32HeadSum) {
                // Thread p writes column p % 8 of step p / 16's core matrix (p / 8) % 2: heads h0 + 2i.
                const int h0 = 8 * (p >> 4) + ((p >> 3) & 1);
                unsigned char* const dst = head_sum_b + slot * kHeadSumBBytes + (p >> 3) * kCoreBytes + (p & 7) * 16;
                const float* const src = args.head_factors + static_cast<std::int64_t>(row) * heads;
#pragma unroll
                for (int i = 0; i < 4; ++i) cp_async_4(dst + 4 * i, src + (h0 + 2 * i < heads ? h0 + 2 * i : 0),
                                                       h0 + 2 * i < heads);
              } else if (p < kHeads) {
                const bool valid = p < heads;
                cp_async_4(factors + slot * kHeads + p,
                           args.head_factors + (valid ? static_cast<std::int64_t>(row) * heads + p : 0), valid);
              }
            }
            if (p == 0) infos[slot] = SlotInfo{row, row >= 0 ? args.num_visible[row] : 0, j == 0 ? slots : 0, t0};
            commit_slot();
          }
          ++epoch;
        }
        run = run_end;
      }
    }
    const int slot = next_slot();
    if (p == 0) infos[slot].row = kEndOfWork;
    commit_slot();
    signal_all();
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Shape::kConsumerRegisters));
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3;
  const int g8 = lane >> 2, tig = lane & 3;
  // The key this lane stores once the quad's sums are reduced: tile tig / 2,
  // row g8 + 8 (tig % 2). With one tile, lanes tig 0 and 1 store (the head
  // sum's 8 columns are equal: lanes 2 and 3 hold the same sums).
  const int my_key = wg * kGroupKeys + (kTiles == 2 ? (tig >> 1) * kTileKeys : 0) + warp * 16 + g8 + 8 * (tig & 1);
  const bool stores = kTiles == 2 || tig < 2;
  auto release = [&](std::uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(bar);
  };
  std::uint32_t key_frag[kTiles][kDim / 32][4];
  // Slot 0's B descriptor at k step 0; slot s, step ks adds (s * 8 KB + ks * 32) >> 4.
  const std::uint64_t desc0 = smem_desc(smem_addr(q_slot(0)), 16, 1024);
  // (tf32) the keys' A descriptor: this warpgroup's tiles of the key tile.
  const std::uint64_t keys_desc0 = smem_desc(smem_addr(key_tile + wg * kGroupKeys * kDim), 16, 1024);
  // One M tile's four k32 steps: keys from registers or from the key tile.
  auto issue_tile = [&](int slot, int mt, float (&tile)[32]) {
    const std::uint64_t desc = desc0 + static_cast<std::uint64_t>(slot * (kQStageBytes >> 4));
#pragma unroll
    for (int ks = 0; ks < kDim / 32; ++ks) {
      if constexpr (!kKeysInRegisters)
        wgmma_m64n64k32_e4m3(tile, keys_desc0 + static_cast<std::uint64_t>(mt * (kTileKeys * kDim >> 4) + ks * 2),
                             desc + static_cast<std::uint64_t>(ks * 2), ks > 0);
      else
        wgmma_m64n64k32_e4m3_rs(tile, key_frag[mt][ks], desc + static_cast<std::uint64_t>(ks * 2), ks > 0);
    }
  };
  auto issue_mma = [&](int slot, float (&acc)[kTiles][32]) {
    wgmma_fence();
#pragma unroll
    for (int mt = 0; mt < kTiles; ++mt) issue_tile(slot, mt, acc[mt]);
    wgmma_commit();
  };
  float key_factor = 0.0f;  // my_key's key scale x 128^-0.5
  // acc[mt][4 j + e] is key g8, head 8 j + 2 tig + e; acc[mt][4 j + 2 + e] key g8 + 8.
  auto epilogue = [&](int slot, const auto& acc) {  // generic: instantiated for fma (two tiles) only
    static_assert(sizeof(acc) == 2 * 32 * sizeof(float), "the quad's four sums are two tiles' two rows");
    const SlotInfo info = infos[slot];
    if (info.row < 0) return;
    // Two sums a key (even and odd heads): eight FMA chains, not four, so a
    // chain's latency is not the epilogue's (ncu: "wait" the top stall).
    float partial[kTiles][2][2] = {};
    const float* f = factors + slot * kHeads + 2 * tig;
#pragma unroll
    for (int j = 0; j < kHeads / 8; ++j) {
      const float2 fj = *reinterpret_cast<const float2*>(f + 8 * j);
#pragma unroll
      for (int mt = 0; mt < kTiles; ++mt) {
        partial[mt][0][0] = fmaf(fmaxf(acc[mt][4 * j], 0.0f), fj.x, partial[mt][0][0]);
        partial[mt][0][1] = fmaf(fmaxf(acc[mt][4 * j + 1], 0.0f), fj.y, partial[mt][0][1]);
        partial[mt][1][0] = fmaf(fmaxf(acc[mt][4 * j + 2], 0.0f), fj.x, partial[mt][1][0]);
        partial[mt][1][1] = fmaf(fmaxf(acc[mt][4 * j + 3], 0.0f), fj.y, partial[mt][1][1]);
      }
    }
    float score[kTiles][2];
#pragma unroll
    for (int mt = 0; mt < kTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) score[mt][half] = partial[mt][half][0] + partial[mt][half][1];
    // The quad's 4 sums (index 2 mt + half), each over its 4 lanes: lanes
    // with tig bit 1 set keep sums 2 and 3 and pass 0 and 1 (and the
    // reverse), then bit 0 picks one of the two. Lane tig ends with sum tig.
    const bool hi = tig & 2, odd = tig & 1;
    float keep0 = hi ? score[1][0] : score[0][0], keep1 = hi ? score[1][1] : score[0][1];
    const float pass0 = hi ? score[0][0] : score[1][0], pass1 = hi ? score[0][1] : score[1][1];
    keep0 += __shfl_xor_sync(0xffffffffu, pass0, 2);
    keep1 += __shfl_xor_sync(0xffffffffu, pass1, 2);
    const float mine = odd ? keep1 : keep0, other = odd ? keep0 : keep1;
    const float sum = mine + __shfl_xor_sync(0xffffffffu, other, 1);
    const int t = info.t0 + my_key;
    if (t < info.visible) args.scores[static_cast<std::int64_t>(info.row) * args.max_visible + t] = sum * key_factor;
  };
  auto wait_full = [&](int g) { mbarrier_wait(full(g % kSlots), (g / kSlots) & 1); };
  // (tf32) relu in place, then the head sum as 8 k8 steps a tile: column n of
  // the result is the same sum for every n, so lane tig keeps the one its key wants.
  const std::uint64_t head_sum_desc0 = smem_desc_interleaved(smem_addr(head_sum_b), kCoreBytes, kCoreBytes);
  auto issue_head_sum = [&](int slot, float (&tile)[32], float (&sum)[4]) {
    const std::uint64_t desc = head_sum_desc0 + static_cast<std::uint64_t>(slot * (kHeadSumBBytes >> 4));
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < kHeads / 8; ++j)
      wgmma_m64n8k8_tf32_rs(sum, tile[4 * j], tile[4 * j + 2], tile[4 * j + 1], tile[4 * j + 3],
                            desc + static_cast<std::uint64_t>(j * (kHeadSumStepBytes >> 4)), j > 0);
    wgmma_commit();
  };
  // (tf32) one tile's scores of the row in `slot`, a commit group of its own.
  auto issue_mma_tile = [&](int slot, int mt, float (&tile)[32]) {
    wgmma_fence();
    issue_tile(slot, mt, tile);
    wgmma_commit();
  };
  auto store_head_sum = [&](int slot, const float (&sums)[kTiles][4]) {
    const SlotInfo info = infos[slot];
    if (info.row < 0) return;
    // Selects, not a pointer into the array: that would put the sums in local memory.
    const float first = (tig & 1) ? sums[0][2] : sums[0][0];
    float sum = first;
    if constexpr (kTiles == 2) sum = (tig & 2) ? ((tig & 1) ? sums[1][2] : sums[1][0]) : first;
    const int t = info.t0 + my_key;
    if (stores && t < info.visible)
      args.scores[static_cast<std::int64_t>(info.row) * args.max_visible + t] = sum * key_factor;
  };

  float acc[2][kTiles][32];
  // An epoch's rows from g + j, kGroupRows of them: the first row's MMAs into
  // acc[0], then body(i, slot) for each (i a constant once unrolled).
  auto for_group_rows = [&](int g, int j, auto&& body) {
    wait_full(g + j);
    issue_mma((g + j) % kSlots, acc[0]);
#pragma unroll
    for (int i = 0; i < kGroupRows; ++i) body(i, (g + j + i) % kSlots);
  };
  for (int g = 0;;) {
    wait_full(g);
    const int first = g % kSlots;
    if (infos[first].row == kEndOfWork) break;
    const int slots = infos[first].epoch_rows;
    // The key fragments (ldmatrix x4's matrices: rows g8 and g8 + 8 of k
    // [0, 16) and [16, 32)) and this lane's key scale, then the key tile is free.
    const int m = lane >> 3;
    if constexpr (kKeysInRegisters) {
#pragma unroll
      for (int mt = 0; mt < kTiles; ++mt)
#pragma unroll
        for (int ks = 0; ks < kDim / 32; ++ks) {
          const int line = wg * kGroupKeys + mt * kTileKeys + warp * 16 + (m & 1) * 8 + (lane & 7);
          const int chunk = ks * 2 + (m >> 1);
          ldmatrix_x4(key_frag[mt][ks], key_tile + line * kDim + ((chunk ^ (line & 7)) << 4));
        }
    }
    key_factor = key_scales[my_key] * rsqrtf(static_cast<float>(kDim));
    // (tf32_shared_keys: the MMAs read the key tile itself, so it is freed at the epoch's end.)
    if constexpr (kKeysInRegisters) release(key_empty);
    if constexpr (kTf32HeadSum) {
      // One accumulator (ptxas keeps the shared-keys form's consumers in 168
      // registers, the register-keys form's in 96: a second one, pinned as the
      // head sum's A, would spill). Per row: its scores
      // (FP8, every tile), then tile by tile its relu and head sum (tf32),
      // the next row's scores for a tile issued as soon as that tile's head
      // sum has read it (groups retire in order: wait<kTiles - 1> leaves only
      // the later tiles' groups in flight). A row is stored at the next row's
      // wait for everything: a read of the sums while any MMA is in flight
      // serializes them (C7514).
      float (&scores)[kTiles][32] = acc[0];
      float sums[kTiles][4] = {};
      for (int j = 0; j < slots; j += kGroupRows) {
        wait_full(g + j);
        issue_mma((g + j) % kSlots, scores);
#pragma unroll
        for (int i = 0; i < kGroupRows; ++i) {
          const int slot = (g + j + i) % kSlots, next = (g + j + i + 1) % kSlots;
          wgmma_wait<0>();
#pragma unroll
          for (int mt = 0; mt < kTiles; ++mt) {
            fence_registers(scores[mt]);
            fence_registers(sums[mt]);
          }
          if (i > 0) {
            store_head_sum((g + j + i - 1) % kSlots, sums);
            release(empty((g + j + i - 1) % kSlots));
          }
#pragma unroll
          for (int mt = 0; mt < kTiles; ++mt)
#pragma unroll
            for (int e = 0; e < 32; ++e) scores[mt][e] = fmaxf(scores[mt][e], 0.0f);
#pragma unroll
          for (int mt = 0; mt < kTiles; ++mt) issue_head_sum(slot, scores[mt], sums[mt]);
          if (i + 1 < kGroupRows) {
            wait_full(g + j + i + 1);
#pragma unroll
            for (int mt = 0; mt < kTiles; ++mt) {
              wgmma_wait<kTiles - 1>();  // tile mt's head sum has read it
              issue_mma_tile(next, mt, scores[mt]);
            }
          }
        }
        wgmma_wait<0>();
#pragma unroll
        for (int mt = 0; mt < kTiles; ++mt) fence_registers(sums[mt]);
        store_head_sum((g + j + kGroupRows - 1) % kSlots, sums);
        release(empty((g + j + kGroupRows - 1) % kSlots));
      }
      if constexpr (!kKeysInRegisters) release(key_empty);
    } else {
      for (int j = 0; j < slots; j += kGroupRows) {
        for_group_rows(g, j, [&](int i, int slot) {
          if (i + 1 < kGroupRows) {
            wait_full(g + j + i + 1);
            issue_mma((g + j + i + 1) % kSlots, acc[(i + 1) % 2]);
            wgmma_wait<1>();
          } else {
            wgmma_wait<0>();
          }
#pragma unroll
          for (int mt = 0; mt < kTiles; ++mt) fence_registers(acc[i % 2][mt]);
          epilogue(slot, acc[i % 2]);
          release(empty(slot));
        });
      }
    }
    g += slots;
  }
}

}  // namespace

void set_v4_indexer_scores_wgmma_grid_limit(int blocks) { g_grid_limit = std::max(blocks, 0); }

namespace {

void launch_scores(const V4IndexerArgs& args, HeadSum sum, cudaStream_t stream) {
  SLUICE_CHECK(args.num_heads > 0 && args.num_heads <= kHeads);
  SLUICE_CHECK(args.max_visible >= 0);
  SLUICE_CHECK_MSG(args.head_factors != nullptr, "the warpgroup-MMA indexer reads head_factors (q_scale x weights)");
  SLUICE_CHECK(args.q != nullptr && args.keys != nullptr && args.key_scale != nullptr && args.key_begin != nullptr &&
               args.num_visible != nullptr && args.scores != nullptr);
  SLUICE_CHECK(reinterpret_cast<std::uintptr_t>(args.keys) % 16 == 0 &&
               reinterpret_cast<std::uintptr_t>(args.q) % 16 == 0);
  if (args.rows == 0 || args.max_visible == 0) return;
  static const int sm_count = [] {
    auto allow = [](auto kernel, int bytes) {
      SLUICE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    };
    allow(v4_indexer_scores_wgmma_kernel<HeadSum::fma>, BlockShape<HeadSum::fma>::kSmemBytes);
    allow(v4_indexer_scores_wgmma_kernel<HeadSum::tf32_shared_keys>, BlockShape<HeadSum::tf32_shared_keys>::kSmemBytes);
    allow(v4_indexer_scores_wgmma_kernel<HeadSum::tf32_register_keys>,
          BlockShape<HeadSum::tf32_register_keys>::kSmemBytes);
    allow(v4_indexer_scores_wgmma_kernel<HeadSum::tf32_register_key_pairs>,
          BlockShape<HeadSum::tf32_register_key_pairs>::kSmemBytes);
    int device = 0, sms = 0;
    SLUICE_CUDA_CHECK(cudaGetDevice(&device));
    SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }();
  auto launch = [&]<HeadSum kSum>() {
    using Shape = BlockShape<kSum>;
    const std::int64_t key_blocks = (args.max_visible + Shape::kBlockKeys - 1) / Shape::kBlockKeys;
    const std::int64_t items = key_blocks * ((args.rows + kItemRows - 1) / kItemRows);
    SLUICE_CHECK_MSG(items < (std::int64_t{1} << 31), "indexer scores: too many work items");
    const auto blocks =
        static_cast<unsigned>(std::min<std::int64_t>(items, g_grid_limit > 0 ? g_grid_limit : sm_count));
    v4_indexer_scores_wgmma_kernel<kSum><<<blocks, Shape::kThreads, Shape::kSmemBytes, stream>>>(
        args, static_cast<int>(key_blocks), static_cast<int>(items));
  };
  switch (sum) {
    case HeadSum::fma: launch.template operator()<HeadSum::fma>(); break;
    case HeadSum::tf32_shared_keys: launch.template operator()<HeadSum::tf32_shared_keys>(); break;
    case HeadSum::tf32_register_keys: launch.template operator()<HeadSum::tf32_register_keys>(); break;
    case HeadSum::tf32_register_key_pairs: launch.template operator()<HeadSum::tf32_register_key_pairs>(); break;
  }
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_v4_indexer_scores_wgmma(const V4IndexerArgs& args, cudaStream_t stream) {
  launch_scores(args, HeadSum::fma, stream);
}

void set_v4_indexer_scores_tf32_keys(V4IndexerTf32Keys keys) { g_tf32_keys = keys; }

void launch_v4_indexer_scores_wgmma_tf32(const V4IndexerArgs& args, cudaStream_t stream) {
  const HeadSum sum = g_tf32_keys == V4IndexerTf32Keys::registers            ? HeadSum::tf32_register_keys
                      : g_tf32_keys == V4IndexerTf32Keys::registers_in_pairs ? HeadSum::tf32_register_key_pairs
                                                                             : HeadSum::tf32_shared_keys;
  launch_scores(args, sum, stream);
}

}  // namespace sluice::cuda
