// The grouped FP8 expert GEMMs' per-K-block promotion and epilogue, shared by
// grouped_gemm_fp8.cu (the ring kernel) and grouped_gemm_fp8_ws.cu (the
// warp-specialised ones). Accumulator layout of m64nN (f32), per thread:
// value i is row (warp % 4) * 16 + lane / 4 + 8 * ((i / 2) % 2) of the
// warpgroup's 64, and column (i / 4) * 8 + (lane % 4) * 2 + i % 2.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace sluice::cuda {

// The columns one weight scale covers in a tile of kCols output columns, so
// that no group straddles two 128-row scale blocks: each half (64) at 128,
// whose column blocks start on multiples of 64; 32 at 192 (blocks and halves
// of 96 start on multiples of 32: the wide tiles of grouped_gemm_fp8_ws.cu).
template <int kCols>
inline constexpr int kFp8ScaleGroupCols = kCols == 128 ? 64 : 32;
template <int kCols>
inline constexpr int kFp8ScaleGroups = kCols / kFp8ScaleGroupCols<kCols>;

// How a tile's accumulator columns are laid out, in chunks of 8 (the
// accumulator's column (i / 4) * 8 + ...). At 128 columns the gate half
// (chunks 0-7) and the up half (8-15) under swiglu. At 192 under swiglu the
// weight tile is interleaved, [gate 0-47 | up 0-47 | gate 48-95 | up 48-95]
// (chunks 0-5, 6-11, 12-17, 18-23), so that each half of it holds whole
// gate / up pairs: a tile of at most 64 rows is split by columns between
// the two consumers of grouped_gemm_fp8_ws.cu, each storing its own outputs.
// A part of a kTileCols tile is the kCols accumulator columns from chunk
// kFirstChunk on (the whole tile, or a split half).
template <int kTileCols, bool kSwiglu>
__host__ __device__ constexpr bool fp8_is_up_chunk(int chunk) {
  return kSwiglu && (kTileCols == 128 ? chunk >= 8 : chunk % 12 >= 6);
}
// The output chunk (8 columns past n0) of gate chunk `chunk`, or of any chunk
// without swiglu.
template <int kTileCols, bool kSwiglu>
__host__ __device__ constexpr int fp8_output_chunk(int chunk) {
  return !kSwiglu || kTileCols == 128 ? chunk : (chunk / 12) * 6 + chunk % 12;
}
// The up chunk paired with gate chunk `chunk` under swiglu.
template <int kTileCols>
inline constexpr int kFp8UpChunkOffset = kTileCols == 128 ? 8 : 6;
// Chunk `chunk`'s weight scale group: the groups of kFp8ScaleGroupCols output
// columns, the gate half's first, then the up half's under swiglu.
template <int kTileCols, bool kSwiglu>
__host__ __device__ constexpr int fp8_scale_group(int chunk) {
  constexpr int kGroupsPerHalf = kSwiglu ? kFp8ScaleGroups<kTileCols> / 2 : kFp8ScaleGroups<kTileCols>;
  const bool up = fp8_is_up_chunk<kTileCols, kSwiglu>(chunk);
  const int gate_chunk = up ? chunk - kFp8UpChunkOffset<kTileCols> : chunk;
  const int column = fp8_output_chunk<kTileCols, kSwiglu>(gate_chunk) * 8;
  return (up ? kGroupsPerHalf : 0) + column / kFp8ScaleGroupCols<kTileCols>;
}
static_assert(fp8_scale_group<192, true>(0) == 0 && fp8_scale_group<192, true>(4) == 1 &&
              fp8_scale_group<192, true>(6) == 3 && fp8_scale_group<192, true>(12) == 1 &&
              fp8_scale_group<192, true>(14) == 2 && fp8_scale_group<192, true>(23) == 5 &&
              fp8_scale_group<192, false>(23) == 5 && fp8_scale_group<128, true>(8) == 1);

// One 128-wide K block's MMA result `acc` (a part of a kTileCols tile) into
// the running f32 sum, times a_scale[row] * w_scale[block]: a_lo / a_hi the
// scales of the thread's two rows, w[g] the weight block's scale for column
// group g (at 128 columns without swiglu, the same block twice).
template <int kTileCols, bool kSwiglu, int kCols = kTileCols, int kFirstChunk = 0>
__device__ __forceinline__ void promote_fp8_k_block(float (&total)[kCols / 2], const float (&acc)[kCols / 2],
                                                    float a_lo, float a_hi, const float (&w)[kFp8ScaleGroups<kTileCols>]) {
  constexpr int kGroups = kFp8ScaleGroups<kTileCols>;
  float s_lo[kGroups], s_hi[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    s_lo[g] = a_lo * w[g];
    s_hi[g] = a_hi * w[g];
  }
#pragma unroll
  for (int i = 0; i < kCols / 2; ++i) {
    const bool hi = (i >> 1) & 1;
    const int group = fp8_scale_group<kTileCols, kSwiglu>(kFirstChunk + i / 4);
    total[i] += acc[i] * (hi ? s_hi[group] : s_lo[group]);
  }
}

// A thread's two rows of a 64-row part of a tile, already scaled, written as
// bf16 to their slots: the SwiGLU of each gate chunk and its up chunk, or the
// columns as they are. The wide tiles' last column block may pass n: those
// columns are not stored (at 128, n is a multiple of the block).
template <bool kSwiglu, int kTileCols = 128, int kCols = kTileCols, int kFirstChunk = 0>
__device__ __forceinline__ void store_fp8_tile_rows(const float (&total)[kCols / 2], int row_lo, int row_hi,
                                                    int num_rows, std::int64_t first_slot, std::int64_t n0,
                                                    int col_in_chunk, std::int64_t n, __nv_bfloat16* out) {
  constexpr bool kMasked = kTileCols != 128;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = h == 0 ? row_lo : row_hi;
    if (r >= num_rows) continue;
    const std::int64_t slot = first_slot + r;
#pragma unroll
    for (int c = 0; c < kCols / 8; ++c) {
      const int chunk = kFirstChunk + c;
      if (fp8_is_up_chunk<kTileCols, kSwiglu>(chunk)) continue;
      const std::int64_t col = n0 + fp8_output_chunk<kTileCols, kSwiglu>(chunk) * 8 + col_in_chunk;
      if (kMasked && col >= n) continue;
      float v[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        v[j] = total[c * 4 + 2 * h + j];
        if constexpr (kSwiglu) {
          const float gate = v[j], up = total[(c + kFp8UpChunkOffset<kTileCols>) * 4 + 2 * h + j];
          // The fast intrinsics: expf's and the IEEE division's slow paths
          // took ~3-7% of gate_up's samples (S47-3); their error is far under
          // bf16's. A very negative gate gives 1 + inf and so -0, as silu does.
          v[j] = __fdividef(gate, 1.0f + __expf(-gate)) * up;
        }
      }
      *reinterpret_cast<__nv_bfloat162*>(out + slot * n + col) = __floats2bfloat162_rn(v[0], v[1]);
    }
  }
}

}  // namespace sluice::cuda
