// MLA decode attention for at most 16 heads a decode row on mma.sync
// (CudaOptions::mla_kernels = mma_16_heads; latent 512 + rope 64, pages of a
// multiple of 8 rows): one GPU's share of DeepSeek-V3's 128 heads under
// tensor parallel 8, the regime where the latent stream, not the MMAs, should
// bound. The wgmma kernels spend 75% of their MMA rows on padding there
// (wgmma's M is 64: S26-3, 58-60% of HBM) or run a chain of m64n16 MMAs and
// cross-warp maxima (the keys-as-M kernel, slower still: S36-1). mma.sync's
// M is 16, the heads exactly, and its MMAs are small enough to spread a
// tile's work over eight warps that each keep their own operands:
//
//   S = Q K^T [16 heads, 32 keys]: warp w takes keys 8 (w % 4) over the
//     latent's half w / 4 (288 dims, 18 k-steps), its Q fragments held in
//     registers for the whole split (72 registers), K by ldmatrix from the
//     tile; the two halves' sums meet in shared memory.
//   softmax: 16 threads a head, two keys each; the running max and sum live
//     in those threads' registers; P (bf16) and the rescale factor go to
//     shared memory.
//   O += P V [16, 512]: warp w owns latent dims 64 w (one panel of the tile,
//     32 f32 accumulators a thread), V by ldmatrix.trans.
//
// So no warp ever waits on another's MMAs except at the two block barriers a
// tile, and each tile's MMAs are 1/4 of the padded kernels'. The phases are
// pipelined over tiles: tile t's P V and tile t + 1's S run between the same
// two barriers, then tile t + 1's softmax (S38-1: the first form, one phase
// each, was bound by its own chain at 2.30 TB/s on an H100).
//
// Loads: warp 0 issues each 32-key tile's TMA boxes (mla_latent_cache_map's
// boxes of one page, already in the 128-byte swizzle; a lane a panel) into a
// ring of kStages tiles, each stage's bytes counted on its mbarrier. Tile
// t - 1's stage is refilled (with tile t - 1 + kStages) once tile t's scores
// are in, the first barrier every warp reaches after its P V of t - 1. (A
// ninth warp to load would put three warps on one of the SM's four
// schedulers, whose quarter of the register file then caps every thread at
// 168 registers: the Q fragments spilled.)
//
// The pairs form (MlaKernels::mma_16_heads_pairs, Shape<4>) runs the same
// phases in blocks of 4 warps, two blocks an SM: each warp takes 16 keys of
// S and two panels of O, each block a ring of 2 tiles, and the two blocks'
// chains interleave on the SM's schedulers.
//
// The one-barrier form (MlaKernels::mma_16_heads_one_barrier, the pairs
// shape): the barrier after the softmax held 22% of the pairs form's stall
// samples (S39-2, ncu). Here every warp computes tile t's softmax itself,
// redundantly, at the positions of its own P A-fragments (rows lane / 4 and
// + 8, 8 keys each; a quad's two shuffles give a row's max and sum): P stays
// in registers as the P V MMA's A operand, the rescale factors are those
// rows' (the rows of the lane's O accumulators), and only S goes through
// shared memory, double-buffered so that one barrier a tile orders it. The
// warps compute identical values from the same inputs, so their running
// maxima agree. The cost: 16 exponentials a lane a tile, not 4.
//
// Output as the wgmma kernels': O / l to o_latent in bf16 when one split
// covers the context, else unnormalised partials and (max, sum) for
// mla_decode.cu's combine.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <numeric>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/latent_wgmma_tile.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mbarrier.cuh"
#include "sluice/backend/cuda/kernels/mla_common.cuh"
#include "sluice/backend/cuda/kernels/mla_kernels.h"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/tma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kHeads = 16;                      // mma.sync's M
constexpr int kTileKeys = 32;
constexpr int kRank = 512, kRope = 64, kWidth = kRank + kRope;
constexpr int kPanels = kWidth / kWgmmaPanelCols;  // 9 panels of 64 dims
constexpr int kPanelBytes = kTileKeys * kWgmmaLineBytes;
constexpr int kTileBytes = kPanels * kPanelBytes;
constexpr int kHalfDims = kWidth / 2;       // a warp's share of S's dims
constexpr int kHalfSteps = kHalfDims / 16;  // 18 k-steps
constexpr int kScoreStride = kTileKeys + 4;  // f32
constexpr int kPStride = kTileKeys + 8;      // bf16: conflict-free ldmatrix rows
constexpr int kQStride = kWidth + 8;         // bf16
constexpr int kMaxBoxes = kTileKeys / 8;     // TMA boxes a tile at the smallest box, 8 rows
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A block's shape by its warps: 8 (one block an SM) or 4 (two an SM, the
// `pairs` form). Each warp takes kWarpKeys keys of a tile's S over half of
// the dims and kWarpPanels 64-dim panels of O; kHeadThreads threads a head
// run the softmax, kHeadKeys keys each.
//   8 warps: a 5-tile ring (~147 KB in flight an SM). The Q fragments take
//     72 registers a thread, so two such blocks would not fit the register
//     file.
//   4 warps: two blocks an SM, each with its own chain of barriers and
//     softmax, so one block's MMAs run while the other waits (S39-1: the
//     8-warp block was bound by its own chain, 2.5 TB/s from L2 on an H100).
//     Shared memory holds two tiles a block.
// kOneBarrier: the one-barrier form (S double-buffered; P, the rescale
// factors and the final (max, sum) stay in registers).
template <int kWarps, bool kOneBarrier = false>
struct Shape {
  static_assert(kWarps == 8 || kWarps == 4, "8 warps, one block an SM, or 4, two");
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlocksPerSm = 8 / kWarps;
  static constexpr int kKeyGroups = kWarps / 2;
  static constexpr int kWarpKeys = kTileKeys / kKeyGroups;  // 8 or 16
  static constexpr int kSTiles = kWarpKeys / 8;             // S's n8 tiles a warp
  static constexpr int kSChains = 4 / kSTiles;              // S's k-steps round-robin over them: shorter MMA chains
  static constexpr int kWarpPanels = kRank / kWgmmaPanelCols / kWarps;
  static constexpr int kHeadThreads = kThreads / kHeads;    // 16 or 8
  static constexpr int kHeadKeys = kTileKeys / kHeadThreads;  // 2 or 4
  static constexpr int kStages = kWarps == 8 ? 5 : 2;
  static constexpr int kScoreBuffers = kOneBarrier ? 2 : 1;
  static constexpr int kSharedSoftmax = kOneBarrier ? 0 : 1;  // P, the rescale factors and (max, sum) in smem
  // Shared memory after the 1024-aligned ring: the queries (read once into
  // registers), both halves' partial scores (a buffer each of the tiles in
  // flight), then (two-barrier forms) P, the rescale factors and each
  // head's final (max, sum), then the mbarriers.
  static constexpr int kQ = kStages * kTileBytes;
  static constexpr int kScores = kQ + kHeads * kQStride * 2;
  static constexpr int kScoreBufferFloats = 2 * kHeads * kScoreStride;
  static constexpr int kP = kScores + kScoreBuffers * kScoreBufferFloats * 4;
  static constexpr int kCorrection = kP + kSharedSoftmax * kHeads * kPStride * 2;
  static constexpr int kFinal = kCorrection + kSharedSoftmax * kHeads * 4;
  static constexpr int kBarriers = kFinal + kSharedSoftmax * 2 * kHeads * 4;
  static constexpr int kBytes = 1024 + kBarriers + kStages * 8;
  static_assert(kKeyGroups * kWarpKeys == kTileKeys && kWarps * kWarpPanels * kWgmmaPanelCols == kRank,
                "a warp's keys and dims");
  static_assert(kHeadKeys % 2 == 0, "P is stored in bf16 pairs");
  // Hopper: 228 KB an SM, 1 KB of it reserved a block.
  static_assert(kBlocksPerSm * (kBytes + 1024) <= 228 * 1024, "the blocks of an SM fit its shared memory");
};

template <int kWarps, bool kOneBarrier>
__global__ void __launch_bounds__(Shape<kWarps, kOneBarrier>::kThreads, Shape<kWarps, kOneBarrier>::kBlocksPerSm)
    decode_16_heads_kernel(StepDeviceView step, MlaDecodeArgs a, const __grid_constant__ CUtensorMap cache_map,
                           int box_rows) {
  using Sh = Shape<kWarps, kOneBarrier>;
  constexpr int kThreads = Sh::kThreads, kStages = Sh::kStages, kKeyGroups = Sh::kKeyGroups;
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ unsigned char smem_raw[];
  const auto [base, smem] = align_smem_1024(smem_raw);
  auto full = [&](int stage) { return base + Sh::kBarriers + 8 * stage; };
  auto* s_q = reinterpret_cast<__nv_bfloat16*>(smem + Sh::kQ);
  auto* s_scores = reinterpret_cast<float*>(smem + Sh::kScores);  // [buffer][half][head][key]
  auto* s_p = reinterpret_cast<__nv_bfloat16*>(smem + Sh::kP);
  auto* s_correction = reinterpret_cast<float*>(smem + Sh::kCorrection);
  auto* s_final = reinterpret_cast<float*>(smem + Sh::kFinal);  // [head]: max (log2 units), then [head]: sum

  const int tid = threadIdx.x, lane = tid % 32;
  const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);
  const int first_head = blockIdx.x * kHeads, i = blockIdx.y, split = blockIdx.z;
  const int heads = min(kHeads, a.num_heads - first_head);
  const MlaDecodeBlock block = mla_decode_block(step, a, i, split, first_head, kTileKeys);
  const int num_tiles = (block.range.end - block.range.begin + kTileKeys - 1) / kTileKeys;
  // (warp 0) Tile t into stage t % kStages: lane b < kMaxBoxes holds the
  // page of box b (box_page), lane p < kPanels issues panel p's boxes, so a
  // tile costs warp 0 a few instructions, not 9-36 TMA issues and a
  // block-table read in one thread on the way to the softmax. The page is
  // loaded a tile before issue_tile() turns it into a cache row: an
  // expression using it where it is loaded would wait out the L2 round trip
  // there, in the barrier's path (S39-1).
  auto box_page = [&](int t) {
    const int key = block.range.begin + t * kTileKeys + lane * box_rows;
    return lane < kMaxBoxes && key < block.range.end ? block.table[key / a.cache.block_size] : 0;
  };
  auto issue_tile = [&](int t, int page) {
    const int first_key = block.range.begin + t * kTileKeys;
    const int num_boxes = (min(kTileKeys, block.range.end - first_key) + box_rows - 1) / box_rows;
    const int slot = page * a.cache.block_size + (first_key + lane * box_rows) % a.cache.block_size;
    const std::uint32_t bar = full(t % kStages), tile = base + (t % kStages) * kTileBytes;
    if (lane == 0) mbarrier_arrive_expect_tx(bar, num_boxes * box_rows * kWgmmaLineBytes * kPanels);
    __syncwarp();
#pragma unroll
    for (int box = 0; box < kMaxBoxes; ++box) {
      const int box_first_row = __shfl_sync(0xffffffffu, slot, box);
      if (lane < kPanels && box < num_boxes)
        tma_load_2d(tile + lane * kPanelBytes + box * box_rows * kWgmmaLineBytes, &cache_map,
                    lane * kWgmmaPanelCols, box_first_row, bar);
    }
  };
  // The queries first: heads past the row's are zeros (finite scores, never
  // written). Issued after the ring, their few bytes would queue behind
  // every block's first kStages tiles, and the first tile, long landed,
  // would wait for them (as the GQA split kernel's did, S39-1).
  for (int c = tid; c < kHeads * (kWidth / 8); c += kThreads) {
    const int r = c / (kWidth / 8), col = (c % (kWidth / 8)) * 8;
    const bool valid = r < heads;
    cp_async_16(s_q + r * kQStride + col, block.q + (valid ? static_cast<std::int64_t>(r) * kWidth + col : 0), valid);
  }
  cp_async_commit();
  int next_page = 0;  // (warp 0) tile kStages's pages, then each next refill's, loaded a tile ahead
  if (warp == 0) {
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(&cache_map) : "memory");
      for (int s = 0; s < kStages; ++s) mbarrier_init(full(s), 1);
      fence_mbarrier_init_cluster();
    }
    __syncwarp();
    for (int t = 0; t < min(kStages, num_tiles); ++t) issue_tile(t, box_page(t));
    if (kStages < num_tiles) next_page = box_page(kStages);
  }
  cp_async_wait<0>();
  __syncthreads();  // also: the barriers' init before any wait
  const int half = warp / kKeyGroups, key_group = warp % kKeyGroups;
  std::uint32_t q_frag[kHalfSteps][4];  // A fragments of this warp's half of the dims
#pragma unroll
  for (int ks = 0; ks < kHalfSteps; ++ks)
    ldmatrix_x4(q_frag[ks], s_q + (lane % 16) * kQStride + half * kHalfDims + ks * 16 + (lane / 16) * 8);

  // Softmax roles: head sm_head, keys kHeadKeys sm_part .. + kHeadKeys - 1;
  // its running max (log2 units, the scale folded in) and sum, the same in
  // all kHeadThreads threads of the head.
  const int sm_head = tid / Sh::kHeadThreads, sm_part = tid % Sh::kHeadThreads;
  float m_run = -INFINITY, l_run = 0.0f;
  // The one-barrier form's: the running max and sum of the lane's rows
  // lane / 4 and + 8, the same in every warp.
  float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.0f, 0.0f};
  const float scale_log2 = a.scale * kLog2e;
  // This warp's panels of O (panel kWarpPanels warp + p): heads lane / 4 and + 8.
  float o_acc[Sh::kWarpPanels][kWgmmaPanelCols / 8][4] = {};

  // Tile t's scores into s_scores: S over this warp's kWarpKeys keys and half of the
  // dims. ldmatrix x4 reads the keys' 8-dim chunks c .. c + 3 (two k-steps);
  // the tile's row r keeps chunk c of its panel at (c ^ r % 8) x 16 bytes,
  // and r % 8 is the lane's row.
  auto scores = [&](int t) {
    const unsigned char* tile = smem + (t % kStages) * kTileBytes;
    mbarrier_wait(full(t % kStages), (t / kStages) & 1);
    float* dst = s_scores + (t % Sh::kScoreBuffers) * Sh::kScoreBufferFloats + half * kHeads * kScoreStride;
#pragma unroll
    for (int n = 0; n < Sh::kSTiles; ++n) {
      float s_acc[Sh::kSChains][4] = {};
      const int key = key_group * Sh::kWarpKeys + 8 * n + lane % 8;
      // Every fragment of the n8 tile loaded before its first MMA: the asm
      // statements keep their program order, so interleaved, each MMA
      // waited out its load.
      std::uint32_t b[kHalfSteps / 2][4];
#pragma unroll
      for (int j = 0; j < kHalfSteps / 2; ++j) {
        const int chunk = half * (kHalfDims / 8) + 4 * j + lane / 8;
        ldmatrix_x4(b[j], tile + (chunk / 8) * kPanelBytes + key * kWgmmaLineBytes + (((chunk % 8) ^ (lane % 8)) << 4));
      }
#pragma unroll
      for (int j = 0; j < kHalfSteps / 2; ++j) {
        mma_16816(s_acc[(2 * j) % Sh::kSChains], q_frag[2 * j], b[j][0], b[j][1]);
        mma_16816(s_acc[(2 * j + 1) % Sh::kSChains], q_frag[2 * j + 1], b[j][2], b[j][3]);
      }
      const int col = key_group * Sh::kWarpKeys + 8 * n + 2 * (lane % 4);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float2 v = make_float2(0.0f, 0.0f);
#pragma unroll
        for (int k = 0; k < Sh::kSChains; ++k) {
          v.x += s_acc[k][2 * h];
          v.y += s_acc[k][2 * h + 1];
        }
        *reinterpret_cast<float2*>(dst + (lane / 4 + 8 * h) * kScoreStride + col) = v;
      }
    }
  };
  // Keys past the range are -inf in the softmax; the last tile's rows there
  // are zeroed as V (stale or another page's: P is 0 but V must be finite),
  // once every warp's S has read them and before any warp's P V.
  auto valid_keys_of = [&](int t) { return block.range.end - (block.range.begin + t * kTileKeys); };
  auto zero_rows_past_range = [&](int t) {
    zero_latent_rows_past<kTileKeys, kRank / kWgmmaPanelCols>(
        valid_keys_of(t), tid, kThreads, [&](int p) { return smem + (t % kStages) * kTileBytes + p * kPanelBytes; });
  };
  // Tile t's online softmax over s_scores: P and the rescale factors to shared
  // memory.
  auto softmax = [&](int t) {
    const int valid_keys = valid_keys_of(t);
    if (valid_keys < kTileKeys) zero_rows_past_range(t);
    constexpr int kKeys = Sh::kHeadKeys;
    float x[kKeys];
    float tile_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < kKeys; ++k) {
      const int key = kKeys * sm_part + k, at = sm_head * kScoreStride + key;
      x[k] = key < valid_keys ? (s_scores[at] + s_scores[kHeads * kScoreStride + at]) * scale_log2 : -INFINITY;
      tile_max = fmaxf(tile_max, x[k]);
    }
#pragma unroll
    for (int d = 1; d < Sh::kHeadThreads; d *= 2)
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, d));
    const float m_new = fmaxf(m_run, tile_max);  // finite: every tile holds a key of the range
    float sum = 0.0f;  // the sum of what P V adds up: P's bf16 values
#pragma unroll
    for (int k = 0; k < kKeys; k += 2) {
      const __nv_bfloat162 p = __floats2bfloat162_rn(exp2f(x[k] - m_new), exp2f(x[k + 1] - m_new));
      *reinterpret_cast<__nv_bfloat162*>(s_p + sm_head * kPStride + kKeys * sm_part + k) = p;
      sum += __low2float(p) + __high2float(p);
    }
#pragma unroll
    for (int d = 1; d < Sh::kHeadThreads; d *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    const float correction = exp2f(m_run - m_new);  // 0 at the first tile (m_run -inf)
    l_run = l_run * correction + sum;
    m_run = m_new;
    if (sm_part == 0) s_correction[sm_head] = correction;
  };
  // The one-barrier form's softmax of tile t, in this warp's registers: P as
  // the A fragments of P V (pf[kk][h + 2 j] holds row lane / 4 + 8 h, keys 16
  // kk + 8 j + 2 (lane % 4) and + 1) and the rescale factors of the lane's
  // two rows.
  auto softmax_in_registers = [&](int t, std::uint32_t(&pf)[kTileKeys / 16][4], float(&correction)[2]) {
    const float* s = s_scores + (t % Sh::kScoreBuffers) * Sh::kScoreBufferFloats;
    const int valid_keys = valid_keys_of(t);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane / 4 + 8 * h;
      float x[kTileKeys / 16][2][2];
      float tile_max = -INFINITY;
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int key = 16 * kk + 8 * j + 2 * (lane % 4), at = row * kScoreStride + key;
          const float2 s0 = *reinterpret_cast<const float2*>(s + at);
          const float2 s1 = *reinterpret_cast<const float2*>(s + kHeads * kScoreStride + at);
          x[kk][j][0] = key < valid_keys ? (s0.x + s1.x) * scale_log2 : -INFINITY;
          x[kk][j][1] = key + 1 < valid_keys ? (s0.y + s1.y) * scale_log2 : -INFINITY;
          tile_max = fmaxf(tile_max, fmaxf(x[kk][j][0], x[kk][j][1]));
        }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float m_new = fmaxf(m_row[h], tile_max);  // finite: every tile holds a key of the range
      float sum = 0.0f;  // the sum of what P V adds up: P's bf16 values
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const __nv_bfloat162 p = __floats2bfloat162_rn(exp2f(x[kk][j][0] - m_new), exp2f(x[kk][j][1] - m_new));
          sum += __low2float(p) + __high2float(p);
          pf[kk][h + 2 * j] = *reinterpret_cast<const std::uint32_t*>(&p);
        }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      correction[h] = exp2f(m_row[h] - m_new);  // 0 at the first tile (m_row -inf)
      l_row[h] = l_row[h] * correction[h] + sum;
      m_row[h] = m_new;
    }
  };
  // O [16, this warp's 64-dim panels] += P [16, 32] V [32, 64] of tile t,
  // with P's A fragments pf and the rescale factors of rows lane / 4 and + 8:
  // V is panel kWarpPanels warp + p of the tile, read transposed; rows kk 16
  // + (lane % 8) + 8 ((lane / 8) % 2).
  auto pv = [&](int t, const std::uint32_t(&pf)[kTileKeys / 16][4], const float(&correction)[2]) {
    const unsigned char* tile = smem + (t % kStages) * kTileBytes;
#pragma unroll
    for (int p = 0; p < Sh::kWarpPanels; ++p)
#pragma unroll
      for (int n = 0; n < kWgmmaPanelCols / 8; ++n)
#pragma unroll
        for (int k = 0; k < 4; ++k) o_acc[p][n][k] *= correction[k / 2];
#pragma unroll
    for (int p = 0; p < Sh::kWarpPanels; ++p) {
      const unsigned char* panel = tile + (Sh::kWarpPanels * warp + p) * kPanelBytes;
      std::uint32_t v[kTileKeys / 16][kWgmmaPanelCols / 16][4];  // a panel's loads first, as in S
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk) {
        const int key = kk * 16 + lane % 8 + ((lane / 8) % 2) * 8;
#pragma unroll
        for (int n = 0; n < kWgmmaPanelCols / 8; n += 2)
          ldmatrix_x4_trans(v[kk][n / 2], panel + key * kWgmmaLineBytes + (((n + lane / 16) ^ (key % 8)) << 4));
      }
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk)
#pragma unroll
        for (int n = 0; n < kWgmmaPanelCols / 8; n += 2) {
          mma_16816(o_acc[p][n], pf[kk], v[kk][n / 2][0], v[kk][n / 2][1]);
          mma_16816(o_acc[p][n + 1], pf[kk], v[kk][n / 2][2], v[kk][n / 2][3]);
        }
    }
  };

  // After the barrier that follows tile t's P V every warp is done with tile
  // t's stage: warp 0 refills it with tile t + kStages.
  auto refill_after = [&](int t) {
    if (warp == 0 && t + kStages < num_tiles) {
      issue_tile(t + kStages, next_page);
      if (t + 1 + kStages < num_tiles) next_page = box_page(t + 1 + kStages);  // used a tile from now
    }
  };
  if constexpr (kOneBarrier) {
    // One barrier a tile: tile t's softmax (in registers, from the S the
    // last barrier published) and P V, then tile t + 1's scores into the
    // other S buffer. The last tile's rows past the range are zeroed behind
    // a barrier of their own.
    if (num_tiles > 0) {
      scores(0);
      __syncthreads();
    }
    for (int t = 0; t < num_tiles; ++t) {
      if (valid_keys_of(t) < kTileKeys) {
        zero_rows_past_range(t);
        __syncthreads();
      }
      std::uint32_t pf[kTileKeys / 16][4];
      float correction[2];
      softmax_in_registers(t, pf, correction);
      pv(t, pf, correction);
      if (t + 1 < num_tiles) scores(t + 1);
      __syncthreads();
      refill_after(t);
    }
  } else {
    // Two phases a tile, between block barriers: tile t's P V with tile t +
    // 1's scores (independent MMAs in one stream, so their latencies
    // overlap), then tile t + 1's softmax.
    if (num_tiles > 0) {
      scores(0);
      __syncthreads();
      softmax(0);
      __syncthreads();
    }
    for (int t = 0; t < num_tiles; ++t) {
      std::uint32_t pf[kTileKeys / 16][4];
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk)
        ldmatrix_x4(pf[kk], s_p + (lane % 16) * kPStride + kk * 16 + (lane / 16) * 8);
      const float correction[2] = {s_correction[lane / 4], s_correction[lane / 4 + 8]};
      pv(t, pf, correction);
      if (t + 1 < num_tiles) scores(t + 1);
      __syncthreads();
      refill_after(t);
      if (t + 1 < num_tiles) softmax(t + 1);
      __syncthreads();
    }
    // Each head's (max, sum) from its softmax threads to the warps holding its O.
    if (sm_part == 0) {
      s_final[sm_head] = m_run;
      s_final[kHeads + sm_head] = l_run;
    }
    __syncthreads();
  }
  // The (max, sum) of row lane / 4 + 8 h.
  auto row_max = [&](int h) { return kOneBarrier ? m_row[h] : s_final[lane / 4 + 8 * h]; };
  auto row_sum = [&](int h) { return kOneBarrier ? l_row[h] : s_final[kHeads + lane / 4 + 8 * h]; };

  const std::int64_t part_base = static_cast<std::int64_t>(i) * a.num_heads;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = lane / 4 + 8 * h;
    if (row >= heads) continue;
    const int head = first_head + row;
    if (a.num_splits == 1) {
      // One split covers the context: every head has a key, so l > 0.
      const float inv_l = 1.0f / row_sum(h);
#pragma unroll
      for (int p = 0; p < Sh::kWarpPanels; ++p) {
        const int col = (Sh::kWarpPanels * warp + p) * kWgmmaPanelCols + 2 * (lane % 4);
        auto* dst = static_cast<__nv_bfloat16*>(a.o_latent) + (part_base + head) * kRank + col;
#pragma unroll
        for (int n = 0; n < kWgmmaPanelCols / 8; ++n)
          *reinterpret_cast<__nv_bfloat162*>(dst + 8 * n) =
              __floats2bfloat162_rn(o_acc[p][n][2 * h] * inv_l, o_acc[p][n][2 * h + 1] * inv_l);
      }
      continue;
    }
    const std::int64_t part = (part_base + head) * a.num_splits + split;
    if (warp == 0 && lane % 4 == 0) {
      const float m = row_max(h);
      a.partial_stats[2 * part] = m == -INFINITY ? -INFINITY : m * kLn2;
      a.partial_stats[2 * part + 1] = row_sum(h);
    }
#pragma unroll
    for (int p = 0; p < Sh::kWarpPanels; ++p) {
      const int col = (Sh::kWarpPanels * warp + p) * kWgmmaPanelCols + 2 * (lane % 4);
      float* dst = a.partial_out + part * kRank + col;
#pragma unroll
      for (int n = 0; n < kWgmmaPanelCols / 8; ++n)
        *reinterpret_cast<float2*>(dst + 8 * n) = make_float2(o_acc[p][n][2 * h], o_acc[p][n][2 * h + 1]);
    }
  }
}

template <int kWarps, bool kOneBarrier>
void launch_16_heads(const StepDeviceView& step, const MlaDecodeArgs& args, int box_rows, const Launch& launch) {
  using Sh = Shape<kWarps, kOneBarrier>;
  constexpr auto kernel = decode_16_heads_kernel<kWarps, kOneBarrier>;
  static bool attribute_set = false;  // once per process and instance: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::kBytes));
    attribute_set = true;
  }
  const dim3 grid((args.num_heads + kHeads - 1) / kHeads, args.num_decode, args.num_splits);
  launch_kernel(kernel, grid, dim3(Sh::kThreads), Sh::kBytes, launch, step, args,
                mla_latent_cache_map(args.cache, box_rows), box_rows);
}

}  // namespace

std::int32_t mla_decode_16_heads_blocks_per_sm(MlaKernels kernels) {
  return kernels == MlaKernels::mma_16_heads ? Shape<8>::kBlocksPerSm : Shape<4>::kBlocksPerSm;
}

bool mla_decode_16_heads_supports(std::int32_t num_heads, std::int32_t block_size) {
  return num_heads <= kMla16HeadsMaxHeads && block_size % 8 == 0;
}

void launch_mla_decode_attention_16_heads(const StepDeviceView& step, const MlaDecodeArgs& args, MlaKernels kernels,
                                          const Launch& launch) {
  SLUICE_CHECK(args.kv_lora_rank == kRank && args.cache.width == kWidth &&
               mla_decode_16_heads_supports(args.num_heads, args.cache.block_size) && args.cache.num_blocks > 0 &&
               mla_decode_16_heads_kernels(kernels));
  // Boxes of whole 8-row lines of the swizzle that never cross a page or a tile.
  const int box_rows = std::gcd(args.cache.block_size, kTileKeys);
  switch (kernels) {
    case MlaKernels::mma_16_heads: launch_16_heads<8, false>(step, args, box_rows, launch); break;
    case MlaKernels::mma_16_heads_pairs: launch_16_heads<4, false>(step, args, box_rows, launch); break;
    default: launch_16_heads<4, true>(step, args, box_rows, launch); break;
  }
  SLUICE_CUDA_CHECK_LAUNCH();
}

CUtensorMap mla_latent_cache_map(const LatentCache& cache, int box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {kWidth, static_cast<cuuint64_t>(cache.num_blocks) * cache.block_size};
  const cuuint64_t strides[1] = {kWidth * sizeof(__nv_bfloat16)};
  const cuuint32_t box[2] = {kWgmmaPanelCols, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = encode_tensor_map()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, cache.data, dims, strides,
                                              box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SLUICE_CHECK_MSG(result == CUDA_SUCCESS, "MLA decode: cuTensorMapEncodeTiled failed");
  return map;
}

}  // namespace sluice::cuda
