// The lightning indexer's FP8 scores on warpgroup MMA (launch_v4_indexer_scores_wgmma,
// deepseek_v4_kernels.h), for prefill: many query rows of one sequence score
// the same keys, so a block holds a tile of 256 keys in shared memory and runs
// every query row of its row group over it.
//
// The keys are wgmma's A (M: 64 keys a tile, two tiles a warpgroup, two
// warpgroups), a row's index heads its B (N: 64 heads), the 128 index dims
// its K (four k32 steps); both e4m3, K-major, in the 128-byte swizzle (a
// record's 128 codes are one line). So the accumulator holds, for each of a
// thread's keys, 16 of the row's heads: relu and the head weights are summed
// in registers, then over the 4 lanes that share the key (two shuffles). The
// rows' queries come through a two-stage ring, the next row's copy in flight
// while this row multiplies.
//
// Precision: the products of two e4m3 codes are exact, but Hopper's FP8 MMA
// sums them with a narrower accumulator than f32 (DeepSeek-V3's report puts
// it near 14 bits), so scores differ from the f32 kernels by up to about
// 2^-13 of the sum of the absolute products; the test bounds it that way.
// DeepSeek's own indexer kernels score on FP8 tensor cores too.
#include <cuda_runtime.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kDim = kV4IndexHeadDim;  // 128 codes: one swizzled line a record
constexpr int kHeads = kV4MaxIndexHeads;
constexpr int kWarpgroups = 2;
constexpr int kThreads = kWarpgroups * 128;
constexpr int kTileKeys = 64;                                    // wgmma's M
constexpr int kKeysPerWarpgroup = 2 * kTileKeys;                 // two M tiles
constexpr int kBlockKeys = kWarpgroups * kKeysPerWarpgroup;      // 256
constexpr int kRowsPerBlock = 64;                                // query rows a block runs over its keys
constexpr int kKeyTileBytes = kBlockKeys * kDim;                 // 32 KB
constexpr int kQStageBytes = kHeads * kDim;                      // 8 KB
constexpr int kSmemBytes = 1024 + kKeyTileBytes + 2 * kQStageBytes + 2 * kHeads * 4;
static_assert(kDim == 128 && kHeads == 64, "one 128-byte line a record, N = 64 heads");

// Copies `lines` 128-byte records from src (line i at src + i * 128; lines from
// `valid` on are zeros) into a swizzled tile: thread t moves chunk t % 8 of
// lines t / 8 + 32 i.
__device__ __forceinline__ void copy_lines(unsigned char* tile, const std::uint8_t* src, int lines, int valid) {
  const int chunk = threadIdx.x & 7, line0 = threadIdx.x >> 3;
  const std::uint32_t swizzled = static_cast<std::uint32_t>((chunk ^ (line0 & 7)) << 4);
  for (int line = line0; line < lines; line += kThreads / 8) {
    const bool ok = line < valid;
    cp_async_16(tile + line * kDim + swizzled, ok ? src + static_cast<std::int64_t>(line) * kDim + chunk * 16 : src,
                ok);
  }
}

__global__ void __launch_bounds__(kThreads) v4_indexer_scores_wgmma_kernel(V4IndexerArgs args) {
  extern __shared__ unsigned char smem_window[];
  const AlignedSmem smem = align_smem_1024(smem_window);
  unsigned char* key_tile = smem.ptr;
  auto q_stage = [&](int stage) { return key_tile + kKeyTileBytes + stage * kQStageBytes; };
  float* factor = reinterpret_cast<float*>(key_tile + kKeyTileBytes + 2 * kQStageBytes);  // [2][kHeads]

  const int t0 = blockIdx.x * kBlockKeys;
  const int row0 = blockIdx.y * kRowsPerBlock;
  const int row_end = min(row0 + kRowsPerBlock, args.rows);
  const int heads = args.num_heads;
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, tig = lane & 3;

  // A row's head factors (q_scale * weight; heads past num_heads: 0) into factor[stage].
  auto load_factors = [&](int row, int stage) {
    if (threadIdx.x < kHeads)
      factor[stage * kHeads + threadIdx.x] =
          threadIdx.x < heads ? args.q_scale[static_cast<std::int64_t>(row) * heads + threadIdx.x] *
                                    args.weights[static_cast<std::int64_t>(row) * heads + threadIdx.x]
                              : 0.0f;
  };
  auto load_q = [&](int row, int stage) {
    copy_lines(q_stage(stage), args.q + static_cast<std::int64_t>(row) * heads * kDim, kHeads, heads);
    cp_async_commit();
  };

  // The keys loaded: their sequence's first key, and this thread's keys' scales.
  int loaded_begin = -1;
  float key_scale[2][2] = {};
  load_q(row0, 0);
  load_factors(row0, 0);
  for (int row = row0; row < row_end; ++row) {
    const int stage = (row - row0) & 1;
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // the row's queries and factors are in; every MMA on the other stage is done
    const int begin = args.key_begin[row];
    const int visible = args.num_visible[row];
    const bool active = visible > t0;
    if (active && begin != loaded_begin) {
      // The keys this block's rows of that sequence see: up to the most any of them sees.
      int count = 0;
      for (int r = row; r < row_end; ++r)
        if (args.key_begin[r] == begin) count = max(count, args.num_visible[r]);
      copy_lines(key_tile, args.keys + (static_cast<std::int64_t>(begin) + t0) * kDim, kBlockKeys, count - t0);
      cp_async_commit();
      cp_async_wait<0>();
      fence_proxy_async();
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int t = t0 + wg * kKeysPerWarpgroup + mt * kTileKeys + warp * 16 + g + 8 * half;
          key_scale[mt][half] = t < count ? args.key_scale[begin + t] : 0.0f;
        }
      loaded_begin = begin;
    }
    if (row + 1 < row_end) load_q(row + 1, stage ^ 1);  // its stage's last MMAs finished before the barrier
    if (!active) {
      if (row + 1 < row_end) load_factors(row + 1, stage ^ 1);
      continue;
    }
    float acc[2][32];
    const std::uint32_t a_base = smem.addr + static_cast<std::uint32_t>(wg * kKeysPerWarpgroup * kDim);
    const std::uint32_t b_base = smem_addr(q_stage(stage));
    wgmma_fence();
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int ks = 0; ks < kDim / 32; ++ks)
        wgmma_m64n64k32_e4m3(acc[mt], smem_desc(a_base + mt * kTileKeys * kDim + ks * 32, 16, 1024),
                             smem_desc(b_base + ks * 32, 16, 1024), ks > 0);
    wgmma_commit();
    if (row + 1 < row_end) load_factors(row + 1, stage ^ 1);  // while the MMAs run
    wgmma_wait<0>();
    fence_registers(acc[0]);
    fence_registers(acc[1]);
    // acc[mt][4 j + e] is key g, head 8 j + 2 tig + e; acc[mt][4 j + 2 + e] key g + 8.
    float score[2][2] = {};
    const float* f = factor + stage * kHeads + 2 * tig;
#pragma unroll
    for (int j = 0; j < kHeads / 8; ++j) {
      const float2 fj = *reinterpret_cast<const float2*>(f + 8 * j);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        score[mt][0] = fmaf(fmaxf(acc[mt][4 * j], 0.0f), fj.x, score[mt][0]);
        score[mt][0] = fmaf(fmaxf(acc[mt][4 * j + 1], 0.0f), fj.y, score[mt][0]);
        score[mt][1] = fmaf(fmaxf(acc[mt][4 * j + 2], 0.0f), fj.x, score[mt][1]);
        score[mt][1] = fmaf(fmaxf(acc[mt][4 * j + 3], 0.0f), fj.y, score[mt][1]);
      }
    }
    const float dim_scale = rsqrtf(static_cast<float>(kDim));
    float* out = args.scores + static_cast<std::int64_t>(row) * args.max_visible;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float v = score[mt][half];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        const int t = t0 + wg * kKeysPerWarpgroup + mt * kTileKeys + warp * 16 + g + 8 * half;
        if (tig == half && t < visible) out[t] = v * dim_scale * key_scale[mt][half];
      }
  }
}

}  // namespace

void launch_v4_indexer_scores_wgmma(const V4IndexerArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.num_heads > 0 && args.num_heads <= kHeads);
  SLUICE_CHECK(args.max_visible >= 0);
  SLUICE_CHECK(args.q != nullptr && args.q_scale != nullptr && args.weights != nullptr && args.keys != nullptr &&
               args.key_scale != nullptr && args.key_begin != nullptr && args.num_visible != nullptr &&
               args.scores != nullptr);
  SLUICE_CHECK(reinterpret_cast<std::uintptr_t>(args.keys) % 16 == 0 &&
               reinterpret_cast<std::uintptr_t>(args.q) % 16 == 0);
  if (args.rows == 0 || args.max_visible == 0) return;
  static const bool smem_raised = [] {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(v4_indexer_scores_wgmma_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)smem_raised;
  const int key_blocks = (args.max_visible + kBlockKeys - 1) / kBlockKeys;
  const int row_blocks = (args.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  SLUICE_CHECK(row_blocks <= 65535);
  const dim3 grid(static_cast<unsigned>(key_blocks), static_cast<unsigned>(row_blocks));
  v4_indexer_scores_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
