// MLA decode attention on Hopper warpgroup MMA with both warpgroups computing
// scores (CudaOptions::mla_kernels = wgmma_seesaw; latent 512 + rope 64,
// sm_90a): FlashMLA's "seesaw" schedule on mla_decode_wgmma.cu's layout.
//
// Why. In the wgmma kernel warpgroup 0 computes S = Q K^T (64 x 64 x 576,
// 2.36M MACs a tile), the softmax and half of P V (1.05M), warpgroup 1 only
// the other half of P V: warpgroup 0 is the critical path and the tensor
// cores idle during its softmax (session 17: an L2-resident probe runs as
// fast as HBM, the kernel is bound by its own chain). Here the tiles go in
// pairs: warpgroup 0 computes S of the even tile, warpgroup 1 of the odd one,
// and each multiplies both tiles' P by its own half of V (O[:, 0:256] and
// O[:, 256:512]), so each does one S and two half-P V a pair and one's
// softmax overlaps the other's MMAs.
//
// The exchange, per pair (e = 2k, o = 2k + 1; maxima in log2 units, the
// scale folded in; m is the running max after the previous pair):
//   warpgroup 0: m_a = max(m, rowmax S_e), c_a = 2^(m - m_a), P_e =
//     2^(S_e - m_a); m_a and P_e to shared memory;
//   warpgroup 1: m_b = max(m_a, rowmax S_o), c_b = 2^(m_a - m_b), P_o =
//     2^(S_o - m_b); m_b and P_o to shared memory;
//   O_half' = (O_half c_a + P_e V_e) c_b + P_o V_o for both halves:
//     warpgroup 0 rescales by c_a, adds P_e V_e, then (m_b read) by c_b and
//     adds P_o V_o; warpgroup 1 rescales once by c_a c_b (c_a from its own m
//     and m_a) and adds (c_b P_e) V_e + P_o V_o, P_e scaled in registers.
// Invariant after each pair: both warpgroups hold the same m (the row max of
// every key so far), O_half = sum_keys 2^(s - m) v_half, and each one's sum
// share l_wg = sum over its own tiles' keys of 2^(s - m); l = l_0 + l_1 at
// the end. Both compute every factor from the same two maxima by the same
// expression, so they agree bit for bit. An odd count of tiles ends on a
// pair without its odd tile: m_b = m_a, c_b = 1, no P_o.
//
// Shared memory (226.6 KB): Q [64, 576] and a 2-stage ring of 64-key latent
// tiles, 128-byte swizzle, as in the wgmma kernel (a third 72 KB stage does
// not fit), one P buffer, the two maxima [64] each. A pair consumes both
// stages, so each stage is refilled as soon as its readers are done, panel
// range by panel range, and S waits panel by panel (FlashMLA's order):
// panels 0-3 (warpgroup 0's V) by warpgroup 0's cp.async once its P V of
// that tile is done, panels 4-8 (warpgroup 1's V and the rope) by warpgroup
// 1's once its P V is; each copying thread arrives on the panel's mbarrier
// through cp.async.mbarrier.arrive (128 a panel), so no block barrier runs
// in the loop. Keys past the range are zero-filled (finite V under P = 0).
// The P buffer: row slice [16 w, 16 w + 16) is only touched by warp w of
// each warpgroup: warpgroup 0 writes P_e, warpgroup 1 reads it and then
// writes P_o there, warpgroup 0 reads P_o before it writes the next P_e.
// Outputs as the wgmma kernel: partials in the simple kernel's format, or
// O / l to o_latent with one split.
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/latent_wgmma_tile.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mbarrier.cuh"
#include "sluice/backend/cuda/kernels/mla_common.cuh"
#include "sluice/backend/cuda/kernels/mla_kernels.h"
#include "sluice/backend/cuda/kernels/mla_wgmma_output.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/tma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kHeads = 64;     // heads a block: wgmma's M
constexpr int kBlockN = 64;    // latent rows (keys) a tile
constexpr int kStages = 2;     // a pair's even tile, its odd tile
constexpr int kRank = 512, kRope = 64, kWidth = kRank + kRope;
constexpr int kPanels = kWidth / kWgmmaPanelCols;             // 9: QK's K dimension
constexpr int kPanelsPerGroup = kRank / kWgmmaPanelCols / 2;  // 4: O columns (and V panels) a warpgroup owns
constexpr int kQPanelBytes = kHeads * kWgmmaLineBytes;
constexpr int kTilePanelBytes = kBlockN * kWgmmaLineBytes;
constexpr int kQBytes = kPanels * kQPanelBytes;
constexpr int kTileBytes = kPanels * kTilePanelBytes;
constexpr int kPStride = kBlockN + 8;  // bf16: padded rows, conflict-free stores and ldmatrix
constexpr int kPBytes = kHeads * kPStride * 2;
constexpr int kRowsPerWarp = kHeads / 4;  // a warp's slice of heads (and of a tile's keys when loading)
// 1024: alignment slack; then Q, the ring, P, the two maxima, the panels' mbarriers.
constexpr int kSmemBytes =
    1024 + kQBytes + kStages * kTileBytes + kPBytes + 2 * kHeads * 4 + kStages * kPanels * 8;
static_assert(kSmemBytes <= 227 * 1024, "one block an SM: Hopper's opt-in shared memory");
// Named barriers (one warpgroup arrives, the other syncs; 256 threads).
constexpr int kMaxEvenReady = 1;  // warpgroup 0's m_a is in shared memory
constexpr int kPEvenReady = 2;    // warpgroup 0's P_e is in shared memory
constexpr int kPOddReady = 3;     // warpgroup 1's m_b and P_o are; it has read P_e
constexpr float kLog2e = 1.4426950408889634f;

// What O and the sum are scaled by when the running max rises from m_old to
// m_new: raise_running_max's expression, so both warpgroups agree with it.
__device__ __forceinline__ float rescale_factor(float m_old, float m_new) {
  return m_new == -INFINITY ? 1.0f : exp2f(m_old - m_new);
}

// P fragments (the accumulator rows row0 and row0 + 8 in registers 0, 2 and
// 1, 3 of each) scaled by their rows' factors; skipped where they are all 1.
__device__ __forceinline__ void scale_p_rows(std::uint32_t (&p)[kBlockN / 16][4], const float (&factor)[2]) {
  if (!__any_sync(0xffffffffu, factor[0] != 1.0f || factor[1] != 1.0f)) return;
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&p[kk][r]));
      p[kk][r] = pack_bf16(v.x * factor[r % 2], v.y * factor[r % 2]);
    }
}

__global__ void __launch_bounds__(kThreads, 1) decode_wgmma_seesaw_kernel(StepDeviceView step, MlaDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ unsigned char smem_raw[];
  const auto [smem_base, smem] = align_smem_1024(smem_raw);
  const std::uint32_t s_q = smem_base;
  const std::uint32_t s_tiles = smem_base + kQBytes;  // [kStages][kPanels][kBlockN][64]
  unsigned char* tiles = smem + kQBytes;
  auto* s_p = reinterpret_cast<__nv_bfloat16*>(smem + kQBytes + kStages * kTileBytes);  // [kHeads][kPStride]
  // [kHeads] each: m_a and m_b of the pair; at the end the two sum shares.
  auto* s_max_even = reinterpret_cast<float*>(smem + kQBytes + kStages * kTileBytes + kPBytes);
  float* s_max_odd = s_max_even + kHeads;
  // [kStages][kPanels] mbarriers: panel p of the stage's tile has landed.
  const std::uint32_t s_full = smem_base + kQBytes + kStages * kTileBytes + kPBytes + 2 * kHeads * 4;
  auto panel_full = [&](int stage, int panel) { return s_full + 8 * (stage * kPanels + panel); };
  // The parity of tile `tile`'s phase on its stage's barriers: the stage's use count, mod 2.
  auto tile_parity = [](int tile) { return static_cast<std::uint32_t>((tile / kStages) & 1); };

  const int tid = threadIdx.x, lane = tid % 32;
  // Through a shuffle so the compiler knows it is uniform across the warp
  // (branches on it then do not serialize the asynchronous MMAs).
  const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp_in_group = (tid % 128) / 32;
  const int first_head = blockIdx.x * kHeads, i = blockIdx.y, split = blockIdx.z;
  const MlaDecodeBlock block = mla_decode_block(step, a, i, split, first_head, kBlockN);
  const auto* cache = static_cast<const __nv_bfloat16*>(a.cache.data);
  const int block_size = a.cache.block_size;
  const int num_tiles = (block.range.end - block.range.begin + kBlockN - 1) / kBlockN;
  auto valid_keys = [&](int tile) { return block.range.end - (block.range.begin + tile * kBlockN); };
  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < kStages * kPanels; ++b) mbarrier_init(s_full + 8 * b, 128);  // one warpgroup's copiers
    fence_mbarrier_init_cluster();
  }
  __syncthreads();  // the barriers' init before any copy arrives on them

  // Panels [first_panel, end_panel) of tile `tile` into its stage, by this
  // warpgroup. Warp w copies the tile's rows [16 w, 16 w + 16): lane l < 16
  // looks up row 16 w + l's cache slot (-1 past the range: zeros), and a
  // lane's four copies of a panel are rows 16 w + lane / 8 + 4 c, chunk
  // lane % 8, so a copy instruction reads four whole 128-byte lines.
  auto load_panels = [&](int tile, int first_panel, int end_panel) {
    const int first_row = warp_in_group * kRowsPerWarp;
    const int key = block.range.begin + tile * kBlockN + first_row + lane;
    std::int32_t slot = -1;
    if (lane < kRowsPerWarp && key < block.range.end)
      slot = block.table[key / block_size] * block_size + key % block_size;
    std::int32_t row_slot[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) row_slot[c] = __shfl_sync(0xffffffffu, slot, lane / 8 + 4 * c);
    const int stage = tile % kStages, chunk = lane % 8;
    // A panel at a time: unrolled, the copies' addresses would spill (they
    // run beside O and an S in flight).
#pragma unroll 1
    for (int p = first_panel; p < end_panel; ++p) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int row = first_row + lane / 8 + 4 * c;
        const bool valid = row_slot[c] >= 0;
        cp_async_16(tiles + stage * kTileBytes + p * kTilePanelBytes + row * kWgmmaLineBytes + ((chunk ^ (row % 8)) << 4),
                    cache + (valid ? static_cast<std::int64_t>(row_slot[c]) * kWidth + p * kWgmmaPanelCols + chunk * 8 : 0),
                    valid);
      }
      cp_async_mbarrier_arrive(panel_full(stage, p));
    }
  };
  // s (+)= Q K^T over panels [first_panel, end_panel) of `tile`, each
  // panel's four k-steps once it has landed (a k-step is a 32-byte advance
  // within the 128-byte line: the swizzle uses address bits).
  auto issue_s = [&](float (&s)[32], int tile, int first_panel, int end_panel) {
    const int stage = tile % kStages;
    const std::uint32_t s_k = s_tiles + stage * kTileBytes;
    wgmma_fence();
#pragma unroll
    for (int p = first_panel; p < end_panel; ++p) {
      mbarrier_wait(panel_full(stage, p), tile_parity(tile));
      fence_proxy_async();  // the cp.async (generic proxy) writes, before wgmma's async-proxy reads
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_m64n64k16_ss(s, smem_desc(s_q + p * kQPanelBytes + kk * 32, 16, 1024),
                           smem_desc(s_k + p * kTilePanelBytes + kk * 32, 16, 1024), p > 0 || kk > 0);
    }
  };
  // This warpgroup's V panels of `tile`, landed and seen by its MMAs (the
  // other warpgroup waited for them before S; this one waits on the
  // mbarriers itself rather than rely on the hand-over's ordering).
  auto wait_own_v = [&](int tile) {
#pragma unroll
    for (int p = 0; p < kPanelsPerGroup; ++p)
      mbarrier_wait(panel_full(tile % kStages, warpgroup * kPanelsPerGroup + p), tile_parity(tile));
    fence_proxy_async();
  };

  // This thread's heads (the accumulator layout: a warp's 16 rows, lane / 4 and + 8).
  const int row0 = warp_in_group * kRowsPerWarp + lane / 4;
  const float scale_log2 = a.scale * kLog2e;
  float o_acc[kPanelsPerGroup][32];  // [panel][n8 block * 4 + i]: this warpgroup's 256 dims
#pragma unroll
  for (int p = 0; p < kPanelsPerGroup; ++p)
#pragma unroll
    for (int k = 0; k < 32; ++k) o_acc[p][k] = 0.0f;
  // Both warpgroups' m (equal after every pair); this warpgroup's share of l, per lane until the end.
  float m_run[2] = {-INFINITY, -INFINITY}, l_share[2] = {0.0f, 0.0f};

  // O[:, this warpgroup's panels] += P V over `tile`'s 64 keys, P from registers.
  auto issue_pv = [&](const std::uint32_t (&p)[kBlockN / 16][4], int tile) {
    const std::uint32_t s_v = s_tiles + (tile % kStages) * kTileBytes + warpgroup * kPanelsPerGroup * kTilePanelBytes;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int panel = 0; panel < kPanelsPerGroup; ++panel)
        wgmma_m64n64k16_rs_tb(o_acc[panel], p[kk],
                              smem_desc(s_v + panel * kTilePanelBytes + kk * 16 * kWgmmaLineBytes, 1024, 1024));
  };
  auto store_p = [&](const std::uint32_t (&p)[kBlockN / 16][4]) {
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      const int key = 8 * j + 2 * (lane % 4);
      *reinterpret_cast<std::uint32_t*>(s_p + row0 * kPStride + key) = p[j / 2][(j % 2) * 2 + 0];
      *reinterpret_cast<std::uint32_t*>(s_p + (row0 + 8) * kPStride + key) = p[j / 2][(j % 2) * 2 + 1];
    }
  };
  auto load_p = [&](std::uint32_t (&p)[kBlockN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      ldmatrix_x4(p[kk], s_p + (warp_in_group * kRowsPerWarp + lane % 16) * kPStride + kk * 16 + (lane / 16) * 8);
  };
  auto fence_o = [&] {
#pragma unroll
    for (int p = 0; p < kPanelsPerGroup; ++p) fence_registers(o_acc[p]);
  };

  // Q by every thread (one commit group), then the first pair's panels,
  // each warpgroup its own; Q is waited for, the tiles on their mbarriers.
  load_latent_queries<kHeads, kWidth, kThreads>(smem, block.q, a.num_heads - first_head);
  cp_async_commit();
  const int first_own_panel = warpgroup == 0 ? 0 : kPanelsPerGroup;
  const int end_own_panel = warpgroup == 0 ? kPanelsPerGroup : kPanels;
  for (int tile = 0; tile < kStages && tile < num_tiles; ++tile) load_panels(tile, first_own_panel, end_own_panel);
  cp_async_commit();
  cp_async_wait<1>();
  fence_proxy_async();
  __syncthreads();

  float s[32];  // S of this warpgroup's tile of the coming pair (accumulator layout)
  if (warpgroup == 0) {
    std::uint32_t p[kBlockN / 16][4];  // P_e, then P_o, as A fragments
    if (num_tiles > 0) {
      issue_s(s, 0, 0, kPanels);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(s);
    }
    // One pair from its even tile on. Whether it has an odd tile and a next
    // pair are compile-time (the loop's pairs, then the last one): an MMA
    // still in flight where branches join makes ptxas serialize them (C7515).
    auto pair = [&](int tile, auto has_odd_tag, auto more_tag) {
      constexpr bool kHasOdd = decltype(has_odd_tag)::value, kMore = decltype(more_tag)::value;
      // m_a first, so warpgroup 1's softmax can start; m is finite from the
      // first tile on (every tile holds a key of the range).
      float m_even[2] = {m_run[0], m_run[1]}, c_even[2];
      raise_running_max<kBlockN>(s, valid_keys(tile), lane, scale_log2, m_even, c_even);
      if (lane % 4 == 0) {
        s_max_even[row0] = m_even[0];
        s_max_even[row0 + 8] = m_even[1];
      }
      named_barrier_arrive(kMaxEvenReady, kThreads);
      float row_sum[2] = {0.0f, 0.0f};
      exponentiate_scores<kBlockN>(s, scale_log2, m_even, p, row_sum);
      store_p(p);
      named_barrier_arrive(kPEvenReady, kThreads);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l_share[h] = l_share[h] * c_even[h] + row_sum[h];
        m_run[h] = m_even[h];
      }
      rescale_panels(o_acc, c_even);
      fence_o();
      wgmma_fence();
      issue_pv(p, tile);
      wgmma_commit();
      wgmma_wait<0>();
      fence_o();
      // The even stage's panels 0-3 are free (S and this P V done): the next even tile's.
      if constexpr (kMore) load_panels(tile + 2, 0, kPanelsPerGroup);
      if constexpr (kHasOdd) {
        named_barrier_sync(kPOddReady, kThreads);
        float c_odd[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float m_odd = s_max_odd[row0 + 8 * h];
          c_odd[h] = rescale_factor(m_even[h], m_odd);
          l_share[h] *= c_odd[h];
          m_run[h] = m_odd;
        }
        load_p(p);
        rescale_panels(o_acc, c_odd);
        wait_own_v(tile + 1);
        fence_o();
        wgmma_fence();
        issue_pv(p, tile + 1);
        wgmma_commit();
      }
      if constexpr (kMore) {
        // S of the next even tile: panels 0-3 (this warpgroup's loads, long
        // landed), then, P_o V done, the odd stage's panels 0-3 reloaded,
        // then panels 4-8 (warpgroup 1's loads).
        issue_s(s, tile + 2, 0, kPanelsPerGroup);
        wgmma_commit();
        wgmma_wait<1>();
        if (tile + 3 < num_tiles) load_panels(tile + 3, 0, kPanelsPerGroup);
        issue_s(s, tile + 2, kPanelsPerGroup, kPanels);
        wgmma_commit();
      }
      wgmma_wait<0>();
      fence_o();
      fence_registers(s);
    };
    int tile = 0;  // the pair's even tile
    for (; tile + 2 < num_tiles; tile += 2) pair(tile, std::true_type{}, std::true_type{});
    if (tile + 1 < num_tiles)
      pair(tile, std::true_type{}, std::false_type{});
    else if (tile < num_tiles)
      pair(tile, std::false_type{}, std::false_type{});
  } else {
    std::uint32_t p_odd[kBlockN / 16][4], p_even[kBlockN / 16][4];
    if (num_tiles > 1) {
      issue_s(s, 1, 0, kPanels);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(s);
    }
    for (int tile = 0; tile < num_tiles; tile += 2) {
      const bool has_odd = tile + 1 < num_tiles, more = tile + 2 < num_tiles;
      named_barrier_sync(kMaxEvenReady, kThreads);
      float m_pair[2] = {s_max_even[row0], s_max_even[row0 + 8]};  // m_a, raised to m_b below
      float c_even[2], c_odd[2] = {1.0f, 1.0f}, row_sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int h = 0; h < 2; ++h) c_even[h] = rescale_factor(m_run[h], m_pair[h]);
      if (has_odd) {
        raise_running_max<kBlockN>(s, valid_keys(tile + 1), lane, scale_log2, m_pair, c_odd);
        if (lane % 4 == 0) {
          s_max_odd[row0] = m_pair[0];
          s_max_odd[row0 + 8] = m_pair[1];
        }
        exponentiate_scores<kBlockN>(s, scale_log2, m_pair, p_odd, row_sum);
      }
      float c_both[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        c_both[h] = c_even[h] * c_odd[h];
        l_share[h] = l_share[h] * c_both[h] + row_sum[h];
        m_run[h] = m_pair[h];
      }
      rescale_panels(o_acc, c_both);
      named_barrier_sync(kPEvenReady, kThreads);
      load_p(p_even);
      if (has_odd) {
        __syncwarp();  // the warp's ldmatrix of its P_e rows before its P_o overwrites them
        store_p(p_odd);
        named_barrier_arrive(kPOddReady, kThreads);
      }
      scale_p_rows(p_even, c_odd);  // P_e was relative to m_a; O here is relative to m_b
      wait_own_v(tile);
      fence_o();
      wgmma_fence();
      if (has_odd) issue_pv(p_odd, tile + 1);
      wgmma_commit();
      issue_pv(p_even, tile);
      wgmma_commit();
      // The odd stage's panels 4-8 are free once P_o V is done, the even
      // stage's once P_e V is: the next pair's tiles.
      wgmma_wait<1>();
      if (tile + 3 < num_tiles) load_panels(tile + 3, kPanelsPerGroup, kPanels);
      wgmma_wait<0>();
      fence_o();
      if (more) load_panels(tile + 2, kPanelsPerGroup, kPanels);
      if (tile + 3 < num_tiles) {
        issue_s(s, tile + 3, 0, kPanels);
        wgmma_commit();
        wgmma_wait<0>();
        fence_registers(s);
      }
    }
  }

  // l = l_0 + l_1, summed in that order by both warpgroups; the maxima's
  // slots carry the shares once both are done with them.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_share[h] += __shfl_xor_sync(0xffffffffu, l_share[h], 1);
    l_share[h] += __shfl_xor_sync(0xffffffffu, l_share[h], 2);
  }
  __syncthreads();
  if (lane % 4 == 0) {
    float* share = warpgroup == 0 ? s_max_even : s_max_odd;
    share[row0] = l_share[0];
    share[row0 + 8] = l_share[1];
  }
  __syncthreads();
  const float l_run[2] = {s_max_even[row0] + s_max_odd[row0], s_max_even[row0 + 8] + s_max_odd[row0 + 8]};
  const MlaWgmmaOutputSite at{.first_head = first_head, .row0 = row0, .warpgroup = warpgroup, .lane = lane,
                               .part_base = static_cast<std::int64_t>(i) * a.num_heads};

  if (a.num_splits == 1) {
    // The whole context in one block: O / l straight to o_latent (bf16), no
    // partials and no combine. Every row has a key, so l > 0.
    const float inv_l[2] = {1.0f / l_run[0], 1.0f / l_run[1]};
    store_mla_o_latent(a, at, o_acc, inv_l);
    return;
  }
  store_mla_partials(a, at, split, o_acc, m_run, l_run);
}

}  // namespace

void launch_mla_decode_attention_wgmma_seesaw(const StepDeviceView& step, const MlaDecodeArgs& args,
                                              const Launch& launch) {
  SLUICE_CHECK(args.kv_lora_rank == kRank && args.cache.width == kWidth);
  static bool attribute_set = false;  // once per process: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(
        cudaFuncSetAttribute(decode_wgmma_seesaw_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    attribute_set = true;
  }
  const dim3 grid((args.num_heads + kHeads - 1) / kHeads, args.num_decode, args.num_splits);
  launch_kernel(decode_wgmma_seesaw_kernel, grid, dim3(kThreads), kSmemBytes, launch, step, args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
