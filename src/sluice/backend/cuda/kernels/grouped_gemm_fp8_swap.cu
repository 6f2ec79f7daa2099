// Grouped FP8 GEMM for prefill with the operands swapped: the weight rows are
// wgmma's M and an expert's tokens its N. The product and numerics are
// grouped_gemm_fp8_ws.cu's (e4m3 wgmma, every 128-wide K block promoted into
// an f32 sum times the token's 1x128 scale and the weight's 128x128 block
// scale); the tile shape is what differs.
//
// Why: at 4,096 tokens an expert holds ~128 slots (DeepSeek-V3, top 8 of
// 256), so tiles of 128 slots are 74% full and an expert's second tile, often
// a few rows, streams the expert's weights again (the paired plan shares them
// across a cluster; S49-1: gate_up read 6.3 GB from HBM for 4.4 GB of weights
// touched). Here a work item is (an expert's tokens, 128 weight rows): the
// tokens, up to 192, are wgmma's N in steps of 16, so the columns issued
// follow the tokens (~94% full), each weight row is read once an item, and
// an expert of up to 192 slots streams its weights once. Both consumers
// always have work: each takes 64 of the item's weight rows over all its
// tokens.
//
// Layout, per stage: the weight tile (128 rows x 128 bytes of K), the token
// tile (up to 192 rows x 128 bytes: the x rows of consecutive slots, copied
// and multiplied by 16, so up to 15 rows past the tile's tokens are the next
// slots' or TMA's zeros), then the scales: each token's (past the tile's
// tokens, whatever the stage held), the weight block's (two under swiglu:
// gate and up), the tile's rows and first slot. Columns past the tile's
// tokens are computed and never stored.
//
// Under swiglu an item covers 64 output columns: their 64 gate rows and 64 up
// rows, copied in 8-row boxes alternately (gate 8, up 8, ...). wgmma's
// accumulator gives a thread rows r and r + 8 of each 16, so every thread
// holds the gate and the up value of one column for the same tokens and
// applies the SwiGLU in registers. Under store an item covers 128 output
// columns, one box.
//
// Warp specialised and persistent as grouped_gemm_fp8_ws.cu (its producer's
// protocol: scales by cp.async arriving on the stage's `full` as they land,
// tiles by TMA completing bytes on it; each consumer warp arrives on `empty`
// once it has promoted the stage). Items go (tile, weight block) with the
// weight blocks fastest, so the blocks running at once hold a few experts'
// tokens in L2 while each reads its own weight rows.
//
// Plan: MoeTileOrder::by_expert_balanced at kSwapTileRows (an expert's slots
// in equal tiles of at most 192). A rows must be consecutive (x in slot
// order); gathered A runs the 128-slot kernels (grouped_gemm_fp8_tile_rows).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_kernel.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mbarrier.cuh"
#include "sluice/backend/cuda/kernels/moe_kernels.h"
#include "sluice/backend/cuda/kernels/tma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kBlockK = 128;      // one e4m3 line = one scale block of K
constexpr int kWRows = 128;       // weight rows an item: two consumers of 64
constexpr int kMaxTokens = kSwapTileRows;
constexpr int kTokenStep = 16;    // wgmma N in steps of 16 (12 widths to compile), as the rows copied
constexpr int kGateUpUnit = 8;    // swiglu: weight rows alternate gate / up every 8
constexpr int kGroupThreads = 128;
constexpr int kConsumers = 2;
constexpr int kThreads = kGroupThreads * (1 + kConsumers);
constexpr int kWTileBytes = kWRows * kBlockK;
constexpr int kXTileBytes = kMaxTokens * kBlockK;
constexpr int kStageBytes = kWTileBytes + kXTileBytes;  // 40 KB
constexpr int kStages = 5;
// A stage's scales: the tokens' (kMaxTokens), the weight block's two (gate,
// up; one under store), then the tile's rows (kEndOfWork after the block's
// last item) and its first slot as ints.
constexpr int kWScales = kMaxTokens;
constexpr int kTileInfo = kMaxTokens + 2;
constexpr int kScaleFloats = kTileInfo + 2;
static_assert(kTileInfo % 2 == 0 && kScaleFloats % 2 == 0, "the tile info is one 8-byte store");
constexpr int kEndOfWork = -1;
constexpr int kBarrierBytes = 2 * kStages * 8;
constexpr int kSmemBytes = kStages * (kStageBytes + kScaleFloats * 4) + kBarrierBytes + 1024;
static_assert(kSmemBytes <= 227 * 1024, "one block an SM");
static_assert(kMaxTokens % kTokenStep == 0 && kMaxTokens <= 2 * kGroupThreads, "a producer thread two token scales");
// The consumers hold N / 2 accumulators and N / 2 sums at N = 192, as the
// 192-row ws kernel does (no spills there at 224).
constexpr int kProducerRegisters = 56;
constexpr int kConsumerRegisters = 224;
static_assert(kProducerRegisters * kGroupThreads + kConsumerRegisters * kGroupThreads * kConsumers <=
                  (65536 / kThreads) / 8 * 8 * kThreads,
              "the registers redistributed must fit the block's allocation");

int g_sm_count = 0;

static_assert(kTokenStep == E4m3RowBoxes::kMinRows && kE4m3RowBoxBytes == kBlockK,
              "the token tile's copies go by tma_load_rows_by_16's rows");

// run(std::integral_constant<int, N>{}) at the narrowest N (by kTokenStep) that holds `tokens`
// (1 to kMaxTokens), as one flat switch (a chain of nested ifs spilled: ptxas, session 50).
template <typename Run>
__device__ __forceinline__ void with_token_width(int tokens, Run& run) {
  static_assert(kMaxTokens == 12 * kTokenStep, "a case a width");
  switch ((tokens + kTokenStep - 1) / kTokenStep) {
    case 1: run(std::integral_constant<int, 16>{}); break;
    case 2: run(std::integral_constant<int, 32>{}); break;
    case 3: run(std::integral_constant<int, 48>{}); break;
    case 4: run(std::integral_constant<int, 64>{}); break;
    case 5: run(std::integral_constant<int, 80>{}); break;
    case 6: run(std::integral_constant<int, 96>{}); break;
    case 7: run(std::integral_constant<int, 112>{}); break;
    case 8: run(std::integral_constant<int, 128>{}); break;
    case 9: run(std::integral_constant<int, 144>{}); break;
    case 10: run(std::integral_constant<int, 160>{}); break;
    case 11: run(std::integral_constant<int, 176>{}); break;
    default: run(std::integral_constant<int, 192>{}); break;
  }
}

// An item's tile: its expert, first slot and rows; expert < 0 past the plan's last tile.
struct SwapTile {
  int expert, first_slot, num_rows;
};
__device__ __forceinline__ SwapTile swap_tile(const GroupedGemmFp8Args& a, int tile) {
  const int expert = tile < a.max_tiles ? a.tile_expert[tile] : -1;
  if (expert < 0) return {-1, 0, 0};
  const int first_slot = a.tile_first_slot[tile];
  const int begin = a.expert_offsets[expert], end = a.expert_offsets[expert + 1];
  return {expert, first_slot, min(balanced_tile_rows(end - begin, kMaxTokens), end - first_slot)};
}

// One consumer's promotion of a K block: sum += acc * w_scale(row) * x_scale(column).
// Value i of the m64nN accumulator is row lane / 4 + 8 ((i / 2) % 2) of the
// warp's 16 and column 8 (i / 4) + 2 (lane % 4) + i % 2.
template <int kN>
__device__ __forceinline__ void promote_swapped(float (&sum)[kN / 2], const float (&acc)[kN / 2], float w_lo,
                                                float w_hi, const float* x_scales, int lane) {
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const float2 xs = *reinterpret_cast<const float2*>(x_scales + 8 * j + 2 * (lane % 4));
    sum[4 * j + 0] += acc[4 * j + 0] * (w_lo * xs.x);
    sum[4 * j + 1] += acc[4 * j + 1] * (w_lo * xs.y);
    sum[4 * j + 2] += acc[4 * j + 2] * (w_hi * xs.x);
    sum[4 * j + 3] += acc[4 * j + 3] * (w_hi * xs.y);
  }
}

// The item's outputs, bf16, transposed back to slot rows. Neighbouring lanes
// (lane ^ 4) hold neighbouring columns (rows of the accumulator), so each pair
// swaps one value and stores two columns of one slot as a 4-byte word.
//   swiglu: a thread's rows are the gate and up values of output column
//   `col` (col_lo); the SwiGLU as grouped_gemm_fp8_epilogue.cuh computes it.
//   store: its rows are output columns col_lo and col_lo + 8.
template <bool kSwiglu, int kN>
__device__ __forceinline__ void store_swapped(const float (&sum)[kN / 2], int num_rows, std::int64_t first_slot,
                                              std::int64_t col_lo, int lane, std::int64_t n,
                                              __nv_bfloat16* out) {
  const bool even = ((lane / 4) & 1) == 0;  // this thread's column is even: it stores (col, col + 1)
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const int t0 = 8 * j + 2 * (lane % 4);  // this thread's two tokens: t0, t0 + 1
    // Per half (one of this thread's two accumulator rows, or the SwiGLU's one value),
    // the value for token t0 and for t0 + 1.
    constexpr int kHalves = kSwiglu ? 1 : 2;
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      float v0, v1;
      if constexpr (kSwiglu) {
        const float g0 = sum[4 * j + 0], g1 = sum[4 * j + 1], u0 = sum[4 * j + 2], u1 = sum[4 * j + 3];
        v0 = __fdividef(g0, 1.0f + __expf(-g0)) * u0;
        v1 = __fdividef(g1, 1.0f + __expf(-g1)) * u1;
      } else {
        v0 = sum[4 * j + 2 * h];
        v1 = sum[4 * j + 2 * h + 1];
      }
      // The even-column thread keeps token t0 and takes its neighbour's t0;
      // the odd one keeps t0 + 1 and takes its neighbour's t0 + 1.
      const float given = __shfl_xor_sync(0xffffffffu, even ? v1 : v0, 4);
      const int token = even ? t0 : t0 + 1;
      if (token >= num_rows) continue;
      const std::int64_t col = col_lo + 8 * h - (even ? 0 : 1);
      const __nv_bfloat162 pair = even ? __floats2bfloat162_rn(v0, given) : __floats2bfloat162_rn(given, v1);
      *reinterpret_cast<__nv_bfloat162*>(out + (first_slot + token) * n + col) = pair;
    }
  }
}

// Work items: (tile, weight block), weight blocks fastest; w_blocks = n / 64
// (swiglu) or n / 128. map_w: the weights as [rows, k], boxes of 8 rows
// (swiglu) or 128 (store); maps_x: x's boxes.
template <bool kSwiglu>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_fp8_swap_kernel(GroupedGemmFp8Args a, const __grid_constant__ E4m3RowBoxes maps_x,
                                 const __grid_constant__ CUtensorMap map_w, int w_blocks, int num_items) {
  extern __shared__ unsigned char smem_window[];
  pdl_launch_dependents();
  pdl_wait();
  const AlignedSmem smem = align_smem_1024(smem_window);
  float* const scales_s = reinterpret_cast<float*>(smem.ptr + kStages * kStageBytes);
  const RingBarriers<kStages> ring_barriers{smem.addr + kStages * (kStageBytes + kScaleFloats * 4)};
  auto full = [&](int stage) { return ring_barriers.full(stage); };
  auto empty = [&](int stage) { return ring_barriers.empty(stage); };
  const int tid = threadIdx.x;
  // Through a shuffle so the compiler knows it is uniform across the warp.
  const int warpgroup = __shfl_sync(0xffffffffu, tid / kGroupThreads, 0);
  const int group_tid = tid % kGroupThreads;
  if (tid == 0) ring_barriers.init(kGroupThreads, kConsumers * 4);  // empty: one arrival a consumer warp
  __syncthreads();
  const std::int64_t n = a.n, k = a.k;
  const int num_k_blocks = static_cast<int>(k / kBlockK);
  const std::int64_t expert_rows = kSwiglu ? 2 * n : n;
  // The item's first output column: weight block b covers [64 b, 64 b + 64) of each half under swiglu.
  constexpr int kItemCols = kSwiglu ? kWRows / 2 : kWRows;

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    int g = 0;  // stages filled so far
    auto wait_empty = [&](int stage) {
      if (g < kStages) return;
      mbarrier_wait(empty(stage), (g / kStages - 1) & 1);
    };
    // The scales' copies arrive on the stage as they land; thread 2 also
    // publishes the tile info it stored.
    auto signal_stage = [&] { arrive_when_copies_land(full(g++ % kStages), group_tid == 2); };
    for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
      const SwapTile tile = swap_tile(a, item / w_blocks);
      if (tile.expert < 0) break;  // the plan's unused tiles are the last ones
      const std::int64_t col0 = static_cast<std::int64_t>(item % w_blocks) * kItemCols;
      const int x_rows = (tile.num_rows + kTokenStep - 1) / kTokenStep * kTokenStep;
      const std::uint32_t tx_bytes = static_cast<std::uint32_t>(kWTileBytes + x_rows * kBlockK);
      const std::int64_t w_row0 = tile.expert * expert_rows + col0;  // the gate (or only) rows
      const std::int64_t w_row1 = w_row0 + n;                         // the up rows (swiglu)
      // Thread t copies the scales of tokens t and t + 128 (tokens past the tile: never read).
      const float* x_scale_src[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int token = group_tid + i * kGroupThreads;
        x_scale_src[i] = token < tile.num_rows ? a.a_scales + tile.first_slot + token : nullptr;
      }
      // Thread 0 the gate (or only) weight block's scale, thread 1 the up block's.
      const float* w_scale_src = nullptr;
      if (group_tid < (kSwiglu ? 2 : 1))
        w_scale_src = a.w_scales + ((group_tid == 0 ? w_row0 : w_row1) / kBlockK) * a.w_scale_row_stride;
      for (int kb = 0; kb < num_k_blocks; ++kb) {
        const int stage = g % kStages;
        wait_empty(stage);
        float* stage_scales = scales_s + stage * kScaleFloats;
        const std::int64_t scale_k = static_cast<std::int64_t>(kb) * a.a_scale_stride;
#pragma unroll
        for (int i = 0; i < 2; ++i)
          if (x_scale_src[i] != nullptr)
            cp_async_4(stage_scales + group_tid + i * kGroupThreads, x_scale_src[i] + scale_k, true);
        if (w_scale_src != nullptr) cp_async_4(stage_scales + kWScales + group_tid, w_scale_src + kb, true);
        if (group_tid == 2)
          *reinterpret_cast<int2*>(stage_scales + kTileInfo) = make_int2(tile.num_rows, tile.first_slot);
        const std::uint32_t w_addr = smem.addr + stage * kStageBytes, x_addr = w_addr + kWTileBytes;
        const std::uint32_t bar = full(stage);
        const int k0 = kb * kBlockK;
        // Before this thread's arrival, so the phase cannot complete without
        // these bytes; and before warp 0's other lanes issue their weight boxes,
        // so no copy completes bytes the phase does not expect yet.
        if (group_tid == 0) mbarrier_expect_tx(bar, tx_bytes);
        __syncwarp();
        if (group_tid == 0) tma_load_rows_by_16(x_addr, maps_x, k0, tile.first_slot, x_rows, bar);
        if constexpr (kSwiglu) {
          // Box u (lane u < 16 of warp 0): 8 gate rows (u even) or 8 up rows (u odd) of units u / 2.
          if (group_tid < kWRows / kGateUpUnit) {
            const int unit = group_tid;
            const std::int64_t row = ((unit & 1) ? w_row1 : w_row0) + (unit >> 1) * kGateUpUnit;
            tma_load_2d(w_addr + unit * kGateUpUnit * kBlockK, &map_w, k0, static_cast<int>(row), bar);
          }
        } else if (group_tid == 0) {
          tma_load_2d(w_addr, &map_w, k0, static_cast<int>(w_row0), bar);
        }
        signal_stage();
      }
    }
    // One more stage, holding no data: the end of this block's work.
    const int stage = g % kStages;
    wait_empty(stage);
    if (group_tid == 2) reinterpret_cast<int*>(scales_s + stage * kScaleFloats)[kTileInfo] = kEndOfWork;
    mbarrier_arrive(full(stage));
    // No wait for the scale copies here: the consumers waited for every data
    // stage's arrivals, which come only once its copies have landed.
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  const int consumer = warpgroup - 1;
  const int lane = tid & 31, warp_in_group = group_tid >> 5;
  auto* out = static_cast<__nv_bfloat16*>(a.out);
  RingCursor<kStages> ring;
  // This consumer's 64 weight rows and the token tile, at stage 0; a stage
  // lies kStageBytes further (the descriptor's start-address field, address / 16).
  const std::uint64_t desc_w0 = smem_desc(smem.addr + consumer * 64 * kBlockK, 16, 1024);
  const std::uint64_t desc_x0 = smem_desc(smem.addr + kWTileBytes, 16, 1024);
  constexpr std::uint64_t kStageDesc = kStageBytes >> 4;
  static_assert(kBlockK == 128, "wgmma_e4m3_k128's K block");
  // The output column of this thread's first accumulator row: under swiglu
  // its rows are unit pairs (gate, up) of 8 columns, a warp's 16 rows one pair.
  const int row_in_group = warp_in_group * 16 + lane / 4;
  const std::int64_t col_in_item =
      kSwiglu ? consumer * 32 + warp_in_group * 8 + lane / 4 : consumer * 64 + row_in_group;
  for (int item = blockIdx.x;; item += gridDim.x) {
    mbarrier_wait(full(ring.stage), ring.phase);
    const int* tile_info = reinterpret_cast<const int*>(scales_s + ring.stage * kScaleFloats) + kTileInfo;
    const int num_rows = tile_info[0], first_slot = tile_info[1];
    if (num_rows == kEndOfWork) break;
    const std::int64_t col_lo = static_cast<std::int64_t>(item % w_blocks) * kItemCols + col_in_item;
    auto run_item = [&](auto tokens) {
      constexpr int kN = decltype(tokens)::value;
      float sum[kN / 2];
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) sum[i] = 0.0f;
      float acc[kN / 2];
      for (int kb = 0; kb < num_k_blocks; ++kb, ring.advance()) {
        const int stage = ring.stage;
        mbarrier_wait(full(stage), ring.phase);
        wgmma_e4m3_k128<kN>(acc, desc_w0 + stage * kStageDesc, desc_x0 + stage * kStageDesc);
        const float* stage_scales = scales_s + stage * kScaleFloats;
        const float w_lo = stage_scales[kWScales], w_hi = stage_scales[kWScales + (kSwiglu ? 1 : 0)];
        wgmma_wait<0>();
        fence_registers(acc);
        promote_swapped<kN>(sum, acc, w_lo, w_hi, stage_scales, lane);
        // Released after the promotion, which reads the stage's token scales: one arrival a warp.
        __syncwarp();
        if (lane == 0) mbarrier_arrive(empty(stage));
      }
      store_swapped<kSwiglu, kN>(sum, num_rows, first_slot, col_lo, lane, n, out);
    };
    with_token_width(num_rows, run_item);
  }
}

template <bool kSwiglu>
void launch_variant(const GroupedGemmFp8Args& a, const Launch& launch) {
  const std::int64_t w_blocks = a.n / (kSwiglu ? kWRows / 2 : kWRows);
  const std::int64_t items = w_blocks * a.max_tiles;
  SLUICE_CHECK_MSG(items < (std::int64_t{1} << 31), "swapped grouped FP8 GEMM: too many work items");
  int blocks = grouped_gemm_fp8_ws_grid_limit() > 0 ? grouped_gemm_fp8_ws_grid_limit() : g_sm_count;
  if (blocks <= 0) {  // not prepared (a test calling the launcher alone)
    int device = 0;
    SLUICE_CUDA_CHECK(cudaGetDevice(&device));
    SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, device));
  }
  blocks = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(blocks, items)));
  const E4m3RowBoxes maps_x = e4m3_row_boxes(a.a, a.a_scale_stride, a.k, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  const CUtensorMap map_w =
      e4m3_rows_tensor_map(a.w, a.w_rows, a.k, kSwiglu ? kGateUpUnit : kWRows, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  cudaLaunchAttribute attributes[1];
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = launch.programmatic ? 1 : 0;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = launch.stream;
  config.attrs = attributes;
  config.numAttrs = 1;
  SLUICE_CUDA_CHECK(cudaLaunchKernelEx(&config, grouped_gemm_fp8_swap_kernel<kSwiglu>, a, maps_x, map_w,
                                       static_cast<int>(w_blocks), static_cast<int>(items)));
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void prepare_grouped_gemm_fp8_swap() {
  SLUICE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_fp8_swap_kernel<true>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  SLUICE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_fp8_swap_kernel<false>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  int device = 0;
  SLUICE_CUDA_CHECK(cudaGetDevice(&device));
  SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&g_sm_count, cudaDevAttrMultiProcessorCount, device));
}

bool grouped_gemm_fp8_swap_supports(const GroupedGemmFp8Args& a) {
  const bool swiglu = a.epilogue == GroupedEpilogue::swiglu;
  return a.tile_rows == kSwapTileRows && a.row_of_slot == nullptr && a.w_rows > 0 && a.a_scale_stride > 0 &&
         a.n % (swiglu ? kWRows / 2 : kWRows) == 0 && a.k % kBlockK == 0;
}

void launch_grouped_gemm_fp8_swap(const GroupedGemmFp8Args& a, const Launch& launch) {
  SLUICE_CHECK_MSG(grouped_gemm_fp8_swap_supports(a),
                   "launch_grouped_gemm_fp8_swap: the plan's balanced tiles of 192, x in slot order, n a multiple of "
                   "64 (swiglu) or 128, k of 128");
  if (a.max_tiles == 0) return;
  a.epilogue == GroupedEpilogue::swiglu ? launch_variant<true>(a, launch) : launch_variant<false>(a, launch);
}

}  // namespace sluice::cuda
