// The Hopper prefill attention kernel's parts (attention_prefill_wgmma_ws.cu,
// `PrefillAttention::wgmma_ws`; sm_90a, head_dim 128, bf16 with f32
// accumulation), over wgmma.cuh's panels and instructions: the S = Q K^T and
// O += P V issue for a 64-row warpgroup, and the output epilogue (bf16 rows,
// or a split piece's f32 partials and log2-sum-exp for attention_prefill.cu's
// merge kernel).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/prefill_params.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda::wgmma_prefill {

inline constexpr int kD = 128;       // head_dim
inline constexpr int kGroupRows = 64;  // query rows a warpgroup (wgmma's M)
inline constexpr int kBlockN = 128;  // keys per tile

// Tiles of [rows][128] bf16 are two swizzled panels of [rows][64] (wgmma.cuh).
inline constexpr int kPanelCols = kWgmmaPanelCols;
inline constexpr int kLineBytes = kWgmmaLineBytes;
inline constexpr int kChunksPerRow = kD / 8;  // 16-byte chunks
inline constexpr int kKvTileBytes = kBlockN * kD * 2;

// S = Q K^T for one warpgroup's 64 rows and a 128-key tile, one commit group:
// 8 k-steps of 16 dims; within a 128-byte line a k-step is a 32-byte advance
// of the start address (the swizzle uses address bits). `s_q` is the Q tile of
// `q_rows` rows, `group_row` this warpgroup's first row in it.
static __device__ __forceinline__ void issue_scores(float (&s)[64], std::uint32_t s_q, int q_rows, int group_row,
                                                    std::uint32_t s_k) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    const int panel = ks / 4, within = (ks % 4) * 32;
    const std::uint64_t dq = smem_desc(s_q + panel * q_rows * kLineBytes + group_row * kLineBytes + within, 16, 1024);
    const std::uint64_t dk = smem_desc(s_k + panel * kBlockN * kLineBytes + within, 16, 1024);
    wgmma_m64n128k16_ss(s, dq, dk, ks > 0);
  }
  wgmma_commit();
}

// O += P V, one commit group. V is [key][dim] in the same panels as K: for
// B = V (keys x dims) that is MN-major. One n64 MMA per panel, so only the
// stride between 8-key groups (1024 bytes) matters.
static __device__ __forceinline__ void issue_pv(float (&o_acc)[2][32], const std::uint32_t (&pa)[kBlockN / 16][4],
                                                std::uint32_t s_v) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
    for (int panel = 0; panel < 2; ++panel) {
      const std::uint64_t dv = smem_desc(s_v + panel * kBlockN * kLineBytes + kk * 16 * kLineBytes, 1024, 1024);
      wgmma_m64n64k16_rs_tb(o_acc[panel], pa[kk], dv);
    }
  }
  wgmma_commit();
}

// 2^x in one MUFU.EX2: exp2f without fast math also scales around the
// instruction to keep denormal results, which a softmax does not need (a term
// below 2^-126 of the row's largest, which is 1, is below f32's resolution of
// the row sum).
static __device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Causal mask (a branch on the diagonal tiles only, not per-score selects) and
// the online softmax of one tile's scores, in place: s becomes P (f32, not yet
// normalised); m_run (log2 domain, scale folded in) and l_run (this lane's
// partial row sums) move on, and corr is the factor O must be scaled by before
// it accumulates this tile's P V.
// s[4j + i]: row pos0 + 8 (i / 2), key key0 + 8j + 2 (lane % 4) + (i % 2);
// group_first_pos is the warpgroup's first row's position.
static __device__ __forceinline__ void online_softmax(float (&s)[64], int key0, int group_first_pos, int pos0,
                                                      int lane, float scale_log2, float (&m_run)[2],
                                                      float (&l_run)[2], float (&corr)[2]) {
  if (key0 + kBlockN - 1 > group_first_pos) {
    const int first_key = key0 + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (first_key + 8 * j + (i % 2) > pos0 + 8 * (i / 2)) s[4 * j + i] = -INFINITY;
  }
  // Row maxima and sums over four independent chains a row: one chain of 32
  // dependent instructions would stall warps of which an SMSP has only three.
  // Unscaled maxima: the scale is folded into the exponent.
  float max4[2][4] = {{-INFINITY, -INFINITY, -INFINITY, -INFINITY}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) max4[i / 2][(j % 2) * 2 + i % 2] = fmaxf(max4[i / 2][(j % 2) * 2 + i % 2], s[4 * j + i]);
  float row_max[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_max[h] = fmaxf(fmaxf(max4[h][0], max4[h][1]), fmaxf(max4[h][2], max4[h][3]));
    row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 1));
    row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 2));
    const float m_new = fmaxf(m_run[h], row_max[h] * scale_log2);
    // m is finite from the first tile on: every row sees its first key there.
    corr[h] = m_new == -INFINITY ? 1.0f : exp2f(m_run[h] - m_new);
    m_run[h] = m_new;
  }
  float sum4[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[4 * j + i] = exp2_ftz(fmaf(s[4 * j + i], scale_log2, -m_run[i / 2]));
      sum4[i / 2][(j % 2) * 2 + i % 2] += s[4 * j + i];
    }
#pragma unroll
  for (int h = 0; h < 2; ++h)
    l_run[h] = l_run[h] * corr[h] + ((sum4[h][0] + sum4[h][1]) + (sum4[h][2] + sum4[h][3]));
}

// P (f32 scores after online_softmax) as bf16 wgmma A fragments, one per 16 keys.
static __device__ __forceinline__ void to_a_fragments(const float (&s)[64], std::uint32_t (&pa)[kBlockN / 16][4]) {
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) {
    pa[j / 2][(j % 2) * 2 + 0] = pack_bf16(s[4 * j + 0], s[4 * j + 1]);
    pa[j / 2][(j % 2) * 2 + 1] = pack_bf16(s[4 * j + 2], s[4 * j + 3]);
  }
}

static __device__ __forceinline__ void rescale_o(float (&o_acc)[2][32], const float (&corr)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 32; ++i) o_acc[h][i] *= corr[(i % 4) / 2];
}

using Params = PrefillParams;

inline Params params_of(const StepDeviceView& step, const AttentionArgs& args) {
  return prefill_params_of(step, args, kD);
}

// What a block computes: the query rows of one 128-row tile of a sequence,
// against keys [key_begin, kv_end), in key tiles [first_tile, num_tiles).
struct BlockWork {
  int seq;
  int row_base;   // the tile's first row in the step
  int num_q;      // rows of the tile (< kPrefillTileRows at a chunk's end)
  int first_pos;  // the first row's position: keys every row sees
  int key_begin, kv_end;
  int first_tile, num_tiles;
};

// Block `index` of the step's whole tiles, or of its split pieces (kSplit).
// A piece's inner key bounds are multiples of kBlockN at or below first_pos,
// so only the causal end is ever a partial key tile.
template <bool kSplit>
static __device__ __forceinline__ BlockWork block_work(const StepDeviceView& step, int index) {
  const std::int32_t* item = kSplit ? step.prefill_split_pieces + 4 * index : step.prefill_tiles + 2 * index;
  BlockWork w;
  w.seq = item[0];
  const int tile_row = item[1];
  w.row_base = step.seq_row_begin[w.seq] + tile_row;
  w.num_q = min(kPrefillTileRows, step.seq_num_rows[w.seq] - tile_row);
  w.first_pos = step.seq_num_computed[w.seq] + tile_row;
  w.key_begin = kSplit ? item[2] : 0;
  w.kv_end = kSplit ? min(item[3], w.first_pos + w.num_q) : w.first_pos + w.num_q;
  w.first_tile = w.key_begin / kBlockN;
  w.num_tiles = (w.kv_end + kBlockN - 1) / kBlockN;
  return w;
}

// The block's Q tile for `head` into swizzled panels at `smem` with cp.async
// (`threads` threads from `tid`); rows past the chunk are zero-filled.
static __device__ __forceinline__ void load_q_tile(unsigned char* smem, const Params& p, const BlockWork& w,
                                                   int head, int tid, int threads) {
  for (int c = tid; c < kPrefillTileRows * kChunksPerRow; c += threads) {
    const int r = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const bool valid = r < w.num_q;
    const __nv_bfloat16* src =
        p.q + (static_cast<std::int64_t>(valid ? w.row_base + r : w.row_base) * p.num_q_heads + head) * kD +
        chunk * 8;
    cp_async_16(smem + swizzled_offset(r, chunk, kPrefillTileRows), src, valid);
  }
}

// Writes one warpgroup's rows (accumulator layout: per warp 16 rows, lane / 4
// and + 8): O / l as bf16, or for a split piece (kSplit, item `piece`) the f32
// partial and m + log2(l). `l_run` is this lane's partial row sum. Rows at or
// past num_q (padding of a short chunk) are not written.
template <bool kSplit>
static __device__ __forceinline__ void store_rows(const Params& p, const float (&o_acc)[2][32], float (&l_run)[2],
                                                  const float (&m_run)[2], int first_row, int num_q, int row_base,
                                                  int head, int piece, int lane) {
  // Row sums are partial per lane: finish them across the four lanes of a row.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = first_row + lane / 4 + 8 * h;
    if (r >= num_q) continue;
    const float inv = 1.0f / l_run[h];
    if constexpr (kSplit) {
      const std::int64_t slot = (static_cast<std::int64_t>(piece) * p.num_q_heads + head) * kPrefillTileRows + r;
      float* part = p.partial_out + slot * kD;
#pragma unroll
      for (int panel = 0; panel < 2; ++panel) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int col = panel * kPanelCols + 8 * j + 2 * (lane % 4);
          *reinterpret_cast<float2*>(part + col) =
              make_float2(o_acc[panel][4 * j + 2 * h] * inv, o_acc[panel][4 * j + 2 * h + 1] * inv);
        }
      }
      if (lane % 4 == 0) p.partial_lse[slot] = m_run[h] + log2f(l_run[h]);
      continue;
    }
    __nv_bfloat16* dst = p.out + (static_cast<std::int64_t>(row_base + r) * p.num_q_heads + head) * kD;
#pragma unroll
    for (int panel = 0; panel < 2; ++panel) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = panel * kPanelCols + 8 * j + 2 * (lane % 4);
        *reinterpret_cast<__nv_bfloat162*>(dst + col) = __floats2bfloat162_rn(
            o_acc[panel][4 * j + 2 * h] * inv, o_acc[panel][4 * j + 2 * h + 1] * inv);
      }
    }
  }
}

// Launches kKernel (one of the wgmma prefill kernels) with `threads` threads
// and `smem_bytes` of shared memory a block, over the step's whole tiles or
// (kSplit) its split pieces, on grid (head, tile or piece).
template <auto kKernel, bool kSplit>
void launch_blocks(int threads, int smem_bytes, const StepDeviceView& step, const AttentionArgs& args,
                   const Launch& launch) {
  static bool attribute_set = false;  // once per process: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    attribute_set = true;
  }
  const dim3 grid(args.num_q_heads, kSplit ? step.num_prefill_split_pieces : step.num_prefill_tiles);
  launch_kernel(kKernel, grid, dim3(threads), smem_bytes, launch, step, params_of(step, args));
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda::wgmma_prefill
