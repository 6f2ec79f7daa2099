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
//   producer     (setmaxnreg down) gathers each K block's A rows through
//                row_of_slot, the weight tile and the stage's scales with
//                cp.async into a kStages-deep ring. Each thread keeps kLag
//                copy groups in flight, then waits for its oldest, fences it
//                for the async proxy and arrives on that stage's `full`
//                mbarrier; before refilling a stage it waits on its `empty`
//                mbarrier.
//   consumers    (setmaxnreg up) 64 tile rows each: wait `full`, issue four
//                wgmma, read the stage's scales, wait for the MMAs, release the
//                stage (one arrival a warp on `empty`), promote. No block-wide
//                barrier: the two consumers drift apart, so one promotes
//                while the other's MMAs run.
// Persistent: gridDim.x blocks walk the work items (tile, column block),
// column blocks fastest as the ring kernel's grid, item blockIdx.x + i *
// gridDim.x; producer and consumers walk the same items and count K blocks
// on through them, so the producer fills the next item's stages while the
// consumers run this one's epilogue.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_epilogue.cuh"
#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_kernel.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mbarrier.cuh"
#include "sluice/backend/cuda/kernels/moe_kernels.h"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kBlockM = 128;  // tile slots: two consumers of 64 rows
constexpr int kBlockN = 128;  // weight rows a block reads (swiglu: 64 gate + 64 up)
constexpr int kBlockK = 128;  // one e4m3 line of 128 bytes = one scale block
constexpr int kGroupThreads = 128;
constexpr int kConsumers = 2;
constexpr int kThreads = kGroupThreads * (1 + kConsumers);
constexpr int kATileBytes = kBlockM * kBlockK;
constexpr int kBTileBytes = kBlockN * kBlockK;
constexpr int kStageBytes = kATileBytes + kBTileBytes;  // 32 KB
// A stage's scales, after the stages: each tile row's A scale, then the
// weight block's (gate, up under swiglu), padded to 16 bytes.
constexpr int kScaleFloats = kBlockM + 4;
constexpr int kStages = 6;
// Copy groups a producer thread keeps in flight before it signals the oldest
// (4 stages, 128 KB an SM, cover L2's latency at the MMA rate). The
// producer signals K block j only after issuing j + kLag, which waits for
// j + kLag - kStages to be released; a two-accumulator consumer waits for
// j while holding j - 1, so kStages >= kLag + 2 (a model of the protocol
// deadlocks at kStages = kLag + 1).
constexpr int kLag = 3;
static_assert(kStages >= kLag + 2, "the consumers must be able to free a stage the producer waits for");
constexpr int kBarrierBytes = 2 * kStages * 8;  // full and empty, a stage
constexpr int kSmemBytes = kStages * (kStageBytes + kScaleFloats * 4) + kBarrierBytes + 1024;  // + alignment slack
static_assert(kSmemBytes <= 227 * 1024, "one block an SM");
// __launch_bounds__(kThreads, 1) caps every thread at 168 registers (64K /
// 384, rounded down to 8); the block's 64,512 are redistributed.
constexpr int kProducerRegisters = 56;
constexpr int kConsumerRegisters = 224;
static_assert(kProducerRegisters * kGroupThreads + kConsumerRegisters * kGroupThreads * kConsumers <=
                  (65536 / kThreads) / 8 * 8 * kThreads,
              "the registers redistributed must fit the block's allocation");
constexpr int kRowsPerPass = kGroupThreads / 8;  // a copy pass: 8 threads a 128-byte row
constexpr int kPasses = kBlockM / kRowsPerPass;  // the same for the A and the weight tile
static_assert(kBlockM == kBlockN && kRowsPerPass % 8 == 0, "every pass keeps a thread's swizzle row (row % 8)");

int g_sm_count = 0;         // prepare_grouped_gemm_fp8_ws()
int g_grid_limit = 0;       // set_grouped_gemm_fp8_ws_grid_limit(); 0: one block an SM

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

// Accumulator layout of m64nN (f32), per thread: value i is row
// (warp % 4) * 16 + lane / 4 + 8 * ((i / 2) % 2) of the warpgroup's 64, and
// column (i / 4) * 8 + (lane % 4) * 2 + i % 2.
template <bool kSwiglu, bool kOverlap>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_fp8_ws_kernel(GroupedGemmFp8Args a, int col_blocks, int num_items) {
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
  if (tid == 0) {
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrier_init(full(stage), kGroupThreads);
      mbarrier_init(empty(stage), kConsumers * 4);  // one arrival a consumer warp
    }
  }
  __syncthreads();

  const std::int64_t n = a.n, k = a.k;
  const int num_k_blocks = static_cast<int>(k / kBlockK);
  const std::int64_t group_rows = kSwiglu ? 2 * n : n;
  // Output columns [n0, n0 + 64) of each half under swiglu, [n0, n0 + 128) otherwise.
  const std::int64_t col_width = kSwiglu ? kBlockN / 2 : kBlockN;

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    // Thread t moves 16-byte chunk t % 8 of rows t / 8 + kRowsPerPass i of
    // both tiles; the swizzle's row term (row % 8) is the same in every pass.
    const int chunk = group_tid & 7, row_base = group_tid >> 3;
    const std::uint32_t dst0 =
        static_cast<std::uint32_t>(row_base * kBlockK + ((chunk ^ (row_base & 7)) << 4));
    const auto* a_q = static_cast<const unsigned char*>(a.a);
    const auto* w_q = static_cast<const unsigned char*>(a.w);
    int g = 0;  // K blocks issued so far, over all this block's items
    for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
      const int tile = item / col_blocks;
      const TileWork w = tile_work(a, tile);
      if (w.group < 0) continue;
      const std::int64_t n0 = static_cast<std::int64_t>(item - tile * col_blocks) * col_width;
      int a_row[kPasses];  // -1 past the group's end: those A rows are left as they are (never stored)
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int r = row_base + kRowsPerPass * i;
        a_row[i] = r < w.num_rows ? (a.row_of_slot != nullptr ? a.row_of_slot[w.first_slot + r] : w.first_slot + r)
                                  : -1;
      }
      // This thread copies tile row group_tid's A scale (rows past the end: row 0's, never used).
      const int scale_slot = w.first_slot + (group_tid < w.num_rows ? group_tid : 0);
      const float* a_scale_src =
          a.a_scales + (a.row_of_slot != nullptr ? a.row_of_slot[scale_slot] : scale_slot);
      const std::int64_t w_row0 = w.group * group_rows + n0;  // first weight row (of the gate half)
      const std::int64_t w_row1 = w_row0 + n;                 // first weight row of the up half
      const float* w_scale_src = group_tid == 0 ? a.w_scales + (w_row0 / kBlockK) * a.w_scale_row_stride
                                 : kSwiglu && group_tid == 1 ? a.w_scales + (w_row1 / kBlockK) * a.w_scale_row_stride
                                                             : nullptr;
      // Pass i's weight row: under swiglu passes [0, kPasses / 2) are gate rows, the rest up rows.
      const unsigned char* w_gate = w_q + (w_row0 + row_base) * k + chunk * 16;
      const unsigned char* w_up = w_q + (w_row1 + row_base) * k + chunk * 16;
      for (int kb = 0; kb < num_k_blocks; ++kb, ++g) {
        const int stage = g % kStages;
        // The stage's previous K block released by both consumers.
        if (g >= kStages) mbarrier_wait(empty(stage), (g / kStages - 1) & 1);
        unsigned char* a_s = smem.ptr + stage * kStageBytes;
        unsigned char* b_s = a_s + kATileBytes;
        float* stage_scales = scales_s + stage * kScaleFloats;
        const std::int64_t k0 = static_cast<std::int64_t>(kb) * kBlockK;
        cp_async_4(stage_scales + group_tid, a_scale_src + static_cast<std::int64_t>(kb) * a.a_scale_stride);
        if (w_scale_src != nullptr) cp_async_4(stage_scales + kBlockM + group_tid, w_scale_src + kb);
#pragma unroll
        for (int i = 0; i < kPasses; ++i)
          if (a_row[i] >= 0)
            cp_async_16(a_s + dst0 + i * kRowsPerPass * kBlockK,
                        a_q + static_cast<std::int64_t>(a_row[i]) * k + k0, true);
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const unsigned char* src =
              kSwiglu && i >= kPasses / 2 ? w_up + (i - kPasses / 2) * kRowsPerPass * k : w_gate + i * kRowsPerPass * k;
          cp_async_16(b_s + dst0 + i * kRowsPerPass * kBlockK, src + k0, true);
        }
        cp_async_commit();
        if (g >= kLag) {
          cp_async_wait<kLag>();
          fence_proxy_async();
          mbarrier_arrive(full((g - kLag) % kStages));
        }
      }
    }
    // The last (up to kLag) K blocks still in flight.
    cp_async_wait<0>();
    fence_proxy_async();
    for (int j = max(g - kLag, 0); j < g; ++j) mbarrier_arrive(full(j % kStages));
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  const int consumer = warpgroup - 1;
  const int lane = tid & 31, warp_in_group = group_tid >> 5;
  // This thread's two accumulator rows (of the tile's 128).
  const int row_lo = consumer * 64 + warp_in_group * 16 + lane / 4, row_hi = row_lo + 8;
  auto* out = static_cast<__nv_bfloat16*>(a.out);
  const int col_in_chunk = (lane % 4) * 2;
  int g = 0;
  for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
    const int tile = item / col_blocks;
    const TileWork w = tile_work(a, tile);
    if (w.group < 0) continue;
    const std::int64_t n0 = static_cast<std::int64_t>(item - tile * col_blocks) * col_width;
    // A consumer whose 64 rows hold no slot skips its MMAs (an expert's spill
    // tile of a few rows costs one warpgroup) but still takes part in the ring.
    const bool active = w.num_rows > consumer * 64;
    float total[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) total[i] = 0.0f;
    // K block kb's stage: wait until it has landed, issue its four MMAs.
    auto issue = [&](float(&acc)[64], int kb) {
      const int stage = (g + kb) % kStages;
      mbarrier_wait(full(stage), ((g + kb) / kStages) & 1);
      const std::uint32_t a_s = smem.addr + stage * kStageBytes + consumer * 64 * kBlockK;
      const std::uint32_t b_s = smem.addr + stage * kStageBytes + kATileBytes;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBlockK / 32; ++ks)
        wgmma_m64n128k32_e4m3(acc, smem_desc(a_s + ks * 32, 16, 1024), smem_desc(b_s + ks * 32, 16, 1024), ks > 0);
      wgmma_commit();
    };
    // K block kb's MMAs are done: read its scales, release its stage, promote.
    auto finish = [&](float(&acc)[64], int kb) {
      fence_registers(acc);
      const int stage = (g + kb) % kStages;
      const float* stage_scales = scales_s + stage * kScaleFloats;
      const float a_lo = stage_scales[row_lo], a_hi = stage_scales[row_hi];
      const float w0 = stage_scales[kBlockM], w1 = kSwiglu ? stage_scales[kBlockM + 1] : w0;
      // This warp's MMAs and scale reads of the stage are done.
      __syncwarp();
      if (lane == 0) mbarrier_arrive(empty(stage));
      const float s00 = a_lo * w0, s01 = a_hi * w0;
      const float s10 = a_lo * w1, s11 = a_hi * w1;
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        const bool hi = (i >> 1) & 1;
        const bool up = i >= 32;  // columns 64..127: the up half under swiglu (same scale otherwise)
        total[i] += acc[i] * (up ? (hi ? s11 : s10) : (hi ? s01 : s00));
      }
    };
    if (!active) {
      // Keep the ring's phases: wait for each stage, release it.
      for (int kb = 0; kb < num_k_blocks; ++kb) {
        const int stage = (g + kb) % kStages;
        mbarrier_wait(full(stage), ((g + kb) / kStages) & 1);
        __syncwarp();
        if (lane == 0) mbarrier_arrive(empty(stage));
      }
    } else if constexpr (kOverlap) {
      // Two accumulators: K block kb + 1's MMAs run while kb is promoted.
      float acc0[64], acc1[64];
      issue(acc0, 0);
      int kb = 0;
      for (; kb + 2 < num_k_blocks; kb += 2) {
        issue(acc1, kb + 1);
        wgmma_wait<1>();
        finish(acc0, kb);
        issue(acc0, kb + 2);
        wgmma_wait<1>();
        finish(acc1, kb + 1);
      }
      // acc0 holds K block kb, the last or the one before it.
      if (kb + 1 < num_k_blocks) {
        issue(acc1, kb + 1);
        wgmma_wait<1>();
        finish(acc0, kb);
        wgmma_wait<0>();
        finish(acc1, kb + 1);
      } else {
        wgmma_wait<0>();
        finish(acc0, kb);
      }
    } else {
      float acc[64];
      for (int kb = 0; kb < num_k_blocks; ++kb) {
        issue(acc, kb);
        wgmma_wait<0>();
        finish(acc, kb);
      }
    }
    g += num_k_blocks;
    if (!active) continue;
    store_fp8_tile_rows<kSwiglu>(total, row_lo, row_hi, w.num_rows, w.first_slot, n0, col_in_chunk, n, out);
  }
}

template <bool kSwiglu, bool kOverlap>
void launch_variant(const GroupedGemmFp8Args& a, const Launch& launch) {
  const std::int64_t col_blocks = a.n / (kSwiglu ? kBlockN / 2 : kBlockN);
  const std::int64_t items = col_blocks * a.max_tiles;
  SLUICE_CHECK_MSG(items < (std::int64_t{1} << 31), "grouped FP8 GEMM: too many work items");
  int blocks = g_grid_limit > 0 ? g_grid_limit : g_sm_count;
  if (blocks <= 0) {  // not prepared (a test calling the launcher alone)
    int device = 0;
    SLUICE_CUDA_CHECK(cudaGetDevice(&device));
    SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, device));
  }
  blocks = static_cast<int>(std::min<std::int64_t>(blocks, items));
  launch_kernel(grouped_gemm_fp8_ws_kernel<kSwiglu, kOverlap>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
                kSmemBytes, launch, a, static_cast<int>(col_blocks), static_cast<int>(items));
  SLUICE_CUDA_CHECK_LAUNCH();
}

template <bool kSwiglu, bool kOverlap>
void raise_smem_limit() {
  SLUICE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_fp8_ws_kernel<kSwiglu, kOverlap>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
}

}  // namespace

void set_grouped_gemm_fp8_ws_grid_limit(int blocks) { g_grid_limit = std::max(blocks, 0); }

void prepare_grouped_gemm_fp8_ws() {
  raise_smem_limit<false, false>();
  raise_smem_limit<true, false>();
  raise_smem_limit<false, true>();
  raise_smem_limit<true, true>();
  int device = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&device));
  SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&g_sm_count, cudaDevAttrMultiProcessorCount, device));
}

void launch_grouped_gemm_fp8_ws(const GroupedGemmFp8Args& a, bool overlap, const Launch& launch) {
  SLUICE_CHECK(a.tile_rows == kBlockM);
  if (a.max_tiles == 0) return;
  const bool swiglu = a.epilogue == GroupedEpilogue::swiglu;
  if (overlap)
    swiglu ? launch_variant<true, true>(a, launch) : launch_variant<false, true>(a, launch);
  else
    swiglu ? launch_variant<true, false>(a, launch) : launch_variant<false, false>(a, launch);
}

}  // namespace sluice::cuda
