// MLA decode attention on Hopper warpgroup MMA (CudaOptions::mla_kernels =
// wgmma; latent 512 + rope 64, sm_90a): the absorbed MQA in which all heads
// of a decode row share every latent row, FlashMLA's layout on wgmma.
//
// One block (two warpgroups) a (64-head group, decode row, key split): the
// heads are wgmma's M. 128 heads cannot share one block: O [128, 512] in f32
// is 64K registers, the whole register file, so the two 64-head groups of a
// (row, split) are neighbouring blocks (blockIdx.x) that stream the same
// latent tiles, the second mostly from L2. Shared memory: the queries
// [64, 576] and a 2-stage ring of 64-key latent tiles [64, 576], both in
// wgmma's 128-byte swizzle (9 panels of 64 columns), gathered key by key
// through the block table by cp.async (warpgroup 1 issues them); the next
// tile loads while this one is multiplied (72 KB in flight an SM). Per tile:
//   warpgroup 0: S = Q K^T [64, 64] over 576 dims (wgmma m64n64k16, both
//     operands from shared memory), the online softmax in registers (exp2,
//     the scale folded in), P and the rescale factor to shared memory for
//     warpgroup 1, then O[:, 0:256] += P V with P from registers;
//   warpgroup 1: waits for P (a named barrier), O[:, 256:512] += P V with P
//     loaded by ldmatrix. V is the tile's first 8 panels read as an MN-major
//     B operand, so the latent tile in shared memory is both K and V.
// Tile loads: cp.async by warpgroup 1, one __syncthreads a tile (the ring).
// (A TMA form, one thread issuing a tile's page boxes onto mbarriers a panel
// and named barriers between the warpgroups, measured equal to cp.async with
// one barrier a stage and 30% slower with one a panel (sessions 17-18); it
// was removed in session 44. The 16-head kernels load by TMA.)
// The split's unnormalised O and (max, sum) go to the partials that
// mla_decode.cu's combine merges, in the simple kernel's format; with one
// split (batch 64 x 8k on 132 SMs) the block writes O / l to o_latent itself
// and the combine is skipped.
#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/latent_wgmma_tile.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mla_common.cuh"
#include "sluice/backend/cuda/kernels/mla_kernels.h"
#include "sluice/backend/cuda/kernels/mla_wgmma_output.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kHeads = 64;     // heads a block: wgmma's M
constexpr int kBlockN = 64;    // latent rows (keys) a tile
constexpr int kStages = 2;     // the tile multiplied and the one loading
constexpr int kRank = 512, kRope = 64, kWidth = kRank + kRope;
constexpr int kPanels = kWidth / kWgmmaPanelCols;                // 9: QK's K dimension
constexpr int kPanelsPerGroup = kRank / kWgmmaPanelCols / 2;     // 4: O columns a warpgroup owns
constexpr int kQPanelBytes = kHeads * kWgmmaLineBytes;
constexpr int kTilePanelBytes = kBlockN * kWgmmaLineBytes;
constexpr int kQBytes = kPanels * kQPanelBytes;
constexpr int kTileBytes = kPanels * kTilePanelBytes;
constexpr int kPStride = kBlockN + 8;  // bf16: padded rows, conflict-free stores and ldmatrix
constexpr int kPBytes = kHeads * kPStride * 2;
// 1024: alignment slack.
constexpr int kSmemBytes = 1024 + kQBytes + kStages * kTileBytes + kPBytes + kHeads * 4;
static_assert(kSmemBytes <= 227 * 1024, "one block an SM: Hopper's opt-in shared memory");
// Named barrier: warpgroup 0's P and rescale factors are in shared memory
// (warpgroup 0 arrives, warpgroup 1 syncs).
constexpr int kPReadyBarrier = 1;
constexpr float kLog2e = 1.4426950408889634f;

__global__ void __launch_bounds__(kThreads, 1) decode_wgmma_kernel(StepDeviceView step, MlaDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ unsigned char smem_raw[];
  const auto [smem_base, smem] = align_smem_1024(smem_raw);
  const std::uint32_t s_q = smem_base;
  const std::uint32_t s_tiles = smem_base + kQBytes;  // [kStages][kPanels][kBlockN][64]
  auto* s_p = reinterpret_cast<__nv_bfloat16*>(smem + kQBytes + kStages * kTileBytes);  // [kHeads][kPStride]
  auto* s_correction = reinterpret_cast<float*>(smem + kQBytes + kStages * kTileBytes + kPBytes);  // [kHeads]

  const int tid = threadIdx.x, lane = tid % 32;
  // Through a shuffle so the compiler knows it is uniform across the warp
  // (branches on it then do not serialize the asynchronous MMAs).
  const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp_in_group = (tid % 128) / 32;
  const int first_head = blockIdx.x * kHeads, i = blockIdx.y, split = blockIdx.z;
  const MlaDecodeBlock block = mla_decode_block(step, a, i, split, first_head, kBlockN);
  const auto* cache = static_cast<const __nv_bfloat16*>(a.cache.data);
  const int block_size = a.cache.block_size;

  load_latent_queries<kHeads, kWidth, kThreads>(smem, block.q, a.num_heads - first_head);
  const int num_tiles = (block.range.end - block.range.begin + kBlockN - 1) / kBlockN;
  // Warpgroup 1 loads the tiles: warpgroup 0's S and softmax are the
  // critical path, and warpgroup 1 waits for P anyway. Warp w of it copies
  // the tile's rows [16 w, 16 w + 16): lane l < 16 looks up row 16 w + l's
  // cache slot once a tile (one division by the block size, one block-table
  // read), and each copy takes its row's slot from that lane by a shuffle.
  // (Looking the slot up a copy, 36 divisions and table reads a thread a
  // tile, kept warpgroup 1 issuing for ~4x the tile's MMA time: run S9-1.)
  // A warp's copy instruction reads 512 consecutive bytes of one or two
  // rows. Keys past the range are zero-filled: their P is 0 and their V must
  // be finite.
  constexpr int kRowsPerWarp = kBlockN / 4;
  auto load_tile = [&](int tile) {
    if (warpgroup != 1 || tile >= num_tiles) return;
    const int first_row = warp_in_group * kRowsPerWarp;
    const int key = block.range.begin + tile * kBlockN + first_row + lane;
    std::int32_t slot = -1;  // this lane's row's slot in the cache; -1: past the range
    if (lane < kRowsPerWarp && key < block.range.end)
      slot = block.table[key / block_size] * block_size + key % block_size;
    // 12 of 36 copies a lane unrolled: unrolled fully, the addresses would spill.
    gather_latent_rows<kBlockN, kRowsPerWarp, kWidth, 12>(smem + kQBytes + (tile % kStages) * kTileBytes, cache,
                                                          first_row, slot, lane);
  };
  // One commit group a tile (the first carries Q too), empty past the end.
  load_tile(0);
  cp_async_commit();

  // This thread's heads (the accumulator layout: a warp's 16 rows, lane / 4 and + 8).
  const int row0 = warp_in_group * 16 + lane / 4;
  const float scale_log2 = a.scale * kLog2e;
  float o_acc[kPanelsPerGroup][32];  // [panel][n8 block * 4 + i]: this warpgroup's 256 dims
#pragma unroll
  for (int p = 0; p < kPanelsPerGroup; ++p)
#pragma unroll
    for (int k = 0; k < 32; ++k) o_acc[p][k] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // warpgroup 0's; l per lane until the end
  std::uint32_t pa[kBlockN / 16][4];  // P as wgmma A fragments, 16 keys each

  // O[:, panels of this warpgroup] += P V over the tile's 64 keys.
  auto issue_pv = [&](std::uint32_t s_k) {
    const std::uint32_t s_v = s_k + warpgroup * kPanelsPerGroup * kTilePanelBytes;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int p = 0; p < kPanelsPerGroup; ++p)
        wgmma_m64n64k16_rs_tb(o_acc[p], pa[kk],
                              smem_desc(s_v + p * kTilePanelBytes + kk * 16 * kWgmmaLineBytes, 1024, 1024));
    wgmma_commit();
  };

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile % kStages;
    cp_async_wait<0>();
    fence_proxy_async();
    // Also: both warpgroups are done with tile - 1 (their MMAs waited for),
    // whose stage the next load reuses, and warpgroup 1 has read P.
    __syncthreads();
    load_tile(tile + 1);
    cp_async_commit();
    const std::uint32_t s_k = s_tiles + stage * kTileBytes;

    if (warpgroup == 0) {
      // S = Q K^T: 36 k-steps of 16 dims; within a 128-byte line a k-step is
      // a 32-byte advance of the start address (the swizzle uses address bits).
      float s[32];
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kWidth / 16; ++ks) {
        const int panel = ks / 4, within = (ks % 4) * 32;
        wgmma_m64n64k16_ss(s, smem_desc(s_q + panel * kQPanelBytes + within, 16, 1024),
                           smem_desc(s_k + panel * kTilePanelBytes + within, 16, 1024), ks > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(s);

      // m is finite from the first tile on: every tile holds a key of the range.
      const int valid_keys = block.range.end - (block.range.begin + tile * kBlockN);
      float correction[2], row_sum[2] = {0.0f, 0.0f};
      raise_running_max<kBlockN>(s, valid_keys, lane, scale_log2, m_run, correction);
      exponentiate_scores<kBlockN>(s, scale_log2, m_run, pa, row_sum);
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        const int key = 8 * j + 2 * (lane % 4);
        *reinterpret_cast<std::uint32_t*>(s_p + row0 * kPStride + key) = pa[j / 2][(j % 2) * 2 + 0];
        *reinterpret_cast<std::uint32_t*>(s_p + (row0 + 8) * kPStride + key) = pa[j / 2][(j % 2) * 2 + 1];
      }
      if (lane % 4 == 0) {
        s_correction[row0] = correction[0];
        s_correction[row0 + 8] = correction[1];
      }
      named_barrier_arrive(kPReadyBarrier, kThreads);
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * correction[h] + row_sum[h];
      // The 128 multiplies sit between the softmax and the P V MMAs, where the tensor cores idle.
      rescale_panels(o_acc, correction);
    } else {
      named_barrier_sync(kPReadyBarrier, kThreads);
      const float correction[2] = {s_correction[row0], s_correction[row0 + 8]};
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
        ldmatrix_x4(pa[kk], s_p + (warp_in_group * 16 + lane % 16) * kPStride + kk * 16 + (lane / 16) * 8);
      rescale_panels(o_acc, correction);
    }
#pragma unroll
    for (int p = 0; p < kPanelsPerGroup; ++p) fence_registers(o_acc[p]);
    wgmma_fence();
    issue_pv(s_k);
    wgmma_wait<0>();
#pragma unroll
    for (int p = 0; p < kPanelsPerGroup; ++p) fence_registers(o_acc[p]);
  }
  cp_async_wait<0>();  // an empty split's queries
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  const MlaWgmmaOutputSite at{.first_head = first_head, .row0 = row0, .warpgroup = warpgroup, .lane = lane,
                               .part_base = static_cast<std::int64_t>(i) * a.num_heads};

  if (a.num_splits == 1) {
    // The whole context in one block: O / l straight to o_latent (bf16), no
    // partials and no combine. Warpgroup 0 holds l; the rescale factors'
    // slots carry 1 / l to warpgroup 1 once it has read the last tile's.
    // Every row has a key, so l > 0.
    __syncthreads();
    if (warpgroup == 0 && lane % 4 == 0) {
      s_correction[row0] = 1.0f / l_run[0];
      s_correction[row0 + 8] = 1.0f / l_run[1];
    }
    __syncthreads();
    const float inv_l[2] = {s_correction[row0], s_correction[row0 + 8]};
    store_mla_o_latent(a, at, o_acc, inv_l);
    return;
  }
  store_mla_partials(a, at, split, o_acc, m_run, l_run);
}

}  // namespace

void launch_mla_decode_attention_wgmma(const StepDeviceView& step, const MlaDecodeArgs& args, const Launch& launch) {
  SLUICE_CHECK(args.kv_lora_rank == kRank && args.cache.width == kWidth);
  static bool attribute_set = false;  // once per process: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(
        cudaFuncSetAttribute(decode_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    attribute_set = true;
  }
  const dim3 grid((args.num_heads + kHeads - 1) / kHeads, args.num_decode, args.num_splits);
  launch_kernel(decode_wgmma_kernel, grid, dim3(kThreads), kSmemBytes, launch, step, args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
