// What the latent-attention kernels on warpgroup MMA (mla_decode_wgmma.cu,
// deepseek_v4_attention_wgmma.cu) share: the gather of
// a tile's latent rows into wgmma's 128-byte swizzle, its TMA boxes, and the
// online softmax's bookkeeping. Where a block's 64 heads are wgmma's M and a
// tile's keys its N, S sits in the accumulator layout: s[4j + i] is head
// row0 + 8 (i / 2), key 8j + 2 (lane % 4) + (i % 2) of the tile, the four
// lanes of a head together.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "sluice/backend/cuda/kernels/mla_kernels.h"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {

// (host; mla_decode_16_heads.cu) The layer's latent cache as a 2D TMA map over
// rows of cache.width bf16 (one a slot), boxes of box_rows rows x 64 columns
// in wgmma's 128-byte swizzle: a box lands exactly as the cp.async gathers
// write a panel's rows.
CUtensorMap mla_latent_cache_map(const LatentCache& cache, int box_rows);

// (TMA loads) The first cache rows of a 64-key tile's boxes: box b holds
// keys first_key + b box_rows on, inside one page, since box_rows divides
// both the block size and the tile and first_key is a multiple of the tile.
// Boxes from num_boxes on hold no key of the range (slot 0, never loaded).
template <int kMaxBoxes>
static __device__ __forceinline__ void latent_box_slots(const std::int32_t* table, int block_size, int first_key,
                                                        int box_rows, int num_boxes, int (&slot)[kMaxBoxes]) {
#pragma unroll
  for (int box = 0; box < kMaxBoxes; ++box) {
    const int key = first_key + box * box_rows;
    slot[box] = box < num_boxes ? table[key / block_size] * block_size + key % block_size : 0;
  }
}

// (TMA loads) Rows [valid_keys, kTileRows) of a tile's kVPanels value panels
// set to zero by `threads` threads (this one `thread`): the rows past the
// range hold stale shared memory, and P V multiplies them by P = 0, which
// gives NaN unless V is finite. panel(p) is the generic address of panel p.
// The caller fences (fence_proxy_async) before wgmma reads them.
template <int kTileRows, int kVPanels, class PanelPtr>
static __device__ __forceinline__ void zero_latent_rows_past(int valid_keys, int thread, int threads,
                                                             PanelPtr panel) {
  constexpr int kChunksPerRow = kVPanels * kWgmmaLineBytes / 16;
  for (int c = thread; c < (kTileRows - valid_keys) * kChunksPerRow; c += threads) {
    const int row = valid_keys + c / kChunksPerRow, p = c % kChunksPerRow / 8, chunk = c % 8;
    *reinterpret_cast<uint4*>(panel(p) + row * kWgmmaLineBytes + chunk * 16) = make_uint4(0, 0, 0, 0);
  }
}

// A block's queries [kHeads, kWidth] (q: its first head's) by cp.async into
// the swizzled tile at dst, all kThreads threads; heads from `heads` on are
// zeros: finite scores, never written.
template <int kHeads, int kWidth, int kThreads>
static __device__ __forceinline__ void load_latent_queries(unsigned char* dst, const __nv_bfloat16* q, int heads) {
  constexpr int kChunks = kWidth / 8;
  for (int c = static_cast<int>(threadIdx.x); c < kHeads * kChunks; c += kThreads) {
    const int r = c / kChunks, chunk = c % kChunks;
    const bool valid = r < heads;
    cp_async_16(dst + swizzled_offset(r, chunk, kHeads), q + (valid ? static_cast<std::int64_t>(r) * kWidth + chunk * 8 : 0),
                valid);
  }
}

// One warp's kRows consecutive rows (first_row on) of a tile of kTileRows
// latents, kWidth bf16 each, by cp.async into the swizzled tile at dst: lane
// l < kRows holds the source row of tile row first_row + l in src (-1: zeros,
// so a key past the range has a finite V), each copy takes it from that lane
// by a shuffle, and a warp's copy instruction reads 512 consecutive bytes.
// kUnroll copies a lane unrolled (all of them would spill the addresses).
template <int kTileRows, int kRows, int kWidth, int kUnroll>
static __device__ __forceinline__ void gather_latent_rows(unsigned char* dst, const __nv_bfloat16* src,
                                                          int first_row, std::int32_t source, int lane) {
  constexpr int kChunks = kWidth / 8;  // 16-byte chunks a row
  constexpr int kCopiesPerLane = kRows * kChunks / 32;
  static_assert(kRows * kChunks % 32 == 0 && kRows <= 32, "whole copies a lane");
#pragma unroll kUnroll
  for (int k = 0; k < kCopiesPerLane; ++k) {
    const int c = lane + 32 * k;  // [0, kRows * kChunks): (row, chunk) of the warp's rows
    const int r = c / kChunks, chunk = c % kChunks;
    const std::int32_t row_source = __shfl_sync(0xffffffffu, source, r);
    const bool valid = row_source >= 0;
    cp_async_16(dst + swizzled_offset(first_row + r, chunk, kTileRows),
                src + (valid ? static_cast<std::int64_t>(row_source) * kWidth + chunk * 8 : 0), valid);
  }
}

// Keys from valid_keys on become -inf; each of the thread's two heads' running
// max (log2 units: the scale is folded into the exponent, not applied to s)
// rises to the tile's, and correction is what its old sum and O are scaled
// by (1 while the max is still -inf).
template <int kKeys>
static __device__ __forceinline__ void raise_running_max(float (&s)[kKeys / 2], int valid_keys, int lane,
                                                         float scale_log2, float (&m_run)[2],
                                                         float (&correction)[2]) {
  if (valid_keys < kKeys) {
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (8 * j + 2 * (lane % 4) + (k % 2) >= valid_keys) s[4 * j + k] = -INFINITY;
  }
  float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
    for (int k = 0; k < 4; ++k) row_max[k / 2] = fmaxf(row_max[k / 2], s[4 * j + k]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 1));
    row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 2));
    const float m_new = fmaxf(m_run[h], row_max[h] * scale_log2);
    correction[h] = m_new == -INFINITY ? 1.0f : exp2f(m_run[h] - m_new);
    m_run[h] = m_new;
  }
}

// exp2(s scale - m) of the tile's scores, packed as bf16 wgmma A fragments
// for P V; each row's sum of the f32 values added to row_sum.
template <int kKeys>
static __device__ __forceinline__ void exponentiate_scores(const float (&s)[kKeys / 2], float scale_log2,
                                                           const float (&m)[2], std::uint32_t (&p)[kKeys / 16][4],
                                                           float (&row_sum)[2]) {
#pragma unroll
  for (int j = 0; j < kKeys / 8; ++j) {
    float pr[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      pr[k] = exp2f(fmaf(s[4 * j + k], scale_log2, -m[k / 2]));
      row_sum[k / 2] += pr[k];
    }
    p[j / 2][(j % 2) * 2 + 0] = pack_bf16(pr[0], pr[1]);
    p[j / 2][(j % 2) * 2 + 1] = pack_bf16(pr[2], pr[3]);
  }
}

// O (a warpgroup's panels of 64 columns, the accumulator layout) scaled by its
// heads' correction; skipped, exactly, where no head of the warp raised its
// max this tile (every factor 1): on most tiles once the max has settled.
template <int kPanels>
static __device__ __forceinline__ void rescale_panels(float (&o)[kPanels][32], const float (&correction)[2]) {
  if (!__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) return;
#pragma unroll
  for (int p = 0; p < kPanels; ++p)
#pragma unroll
    for (int k = 0; k < 32; ++k) o[p][k] *= correction[(k % 4) / 2];
}

}  // namespace sluice::cuda
