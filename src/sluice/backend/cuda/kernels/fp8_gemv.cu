// The FP8 block-scaled GEMV of decode (fp8_gemv.h): weights streamed once
// with 16-byte loads, dequantized in registers, multiplied on tensor cores.
//
// Why tensor cores in a GEMV: at 16 rows a weight byte takes 16 FMAs, and on
// CUDA cores the FMAs plus the e4m3 conversion would outrun the byte's share
// of issue slots (~6 instructions a byte at 4.3 TB/s over 132 SMs). An
// m16n8k16 bf16 mma takes the 16 activation rows as A and 8 weight rows as B.
//
// Layout: a warp owns kTiles tiles of 8 weight rows and walks K in chunks of
// 128 (one scale block). Lane (g = lane / 4, q = lane % 4) loads 32
// contiguous bytes of row g of each tile, [32q, 32q + 32) of the chunk, so a
// tile's 8 rows are read as 8 whole 128-byte lines. A dot product does not
// care about the order of K, so the mma's k index is permuted to match what
// each lane holds: at mma step s (0..7) the lane's B pairs are its bytes
// 4s..4s+1 (mma k 2q, 2q+1) and 4s+2..4s+3 (mma k 2q+8, 2q+9), and its A
// registers are the same K of activation rows g and g + 8 (two 16-byte
// loads of 8 bf16 cover two steps). Each chunk's sums stay in their own
// accumulators and are added times the block's scale: the checkpoint's
// math (e4m3 value x scale) with bf16 activations and f32 sums, and the
// weight never rounded to bf16 after scaling.
//
// Split K: a stripe of 16 weight rows is `parts` warps, each taking a
// contiguous run of chunks; parts 1.. add into part 0 through shared memory.
// A block holds `stripes` stripes: warps of the same part read the same
// activations, which L1 then serves once (weights are loaded past L1). At
// one stripe a block every weight byte also pulls a byte of activations
// from L2 at m <= 8 (two at m > 8), the cost of 2 tiles a warp.
// fp8_gemv_split() picks both from an occupancy table.
//
// Measured (docs/benchmarks.md, session 14): 1.6-9.6x the grouped kernel on
// V4-Flash's and V3's dense shapes; ~65% of HBM on large weights at m <= 4,
// 35-49% at m = 16; a ~4.4 us floor on 2-4 MB weights. Stripes gained 2%
// (m <= 4) to 25% (m = 16) but did not lift the 65%: the likely limit is
// bytes in flight (one chunk ahead a lane, ~24 warps a multiprocessor at
// 74-86 registers), not yet confirmed with ncu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/fp8_gemv.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kChunk = 128;  // K a chunk: one scale block
constexpr int kTiles = 2;    // tiles of 8 weight rows a warp
constexpr int kRowsPerStripe = 8 * kTiles;
constexpr int kMaxThreads = kFp8GemvMaxBlockWarps * 32;  // 512: up to 128 registers, no spills

struct Params {
  const __nv_bfloat16* x;
  const std::uint8_t* w;
  const float* w_scales;
  void* out;
  int m, n, k, scale_row_stride, num_chunks, parts;
  Dt out_dt;
};

// Two e4m3 (low byte first) -> bf16x2, exactly (e4m3 -> f16 is exact, and
// every e4m3 value is a bf16).
__device__ __forceinline__ std::uint32_t e4m3x2_to_bf16x2(std::uint32_t bits) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&raw));
  return pack_bf16(f.x, f.y);
}

struct ChunkWeights {
  uint4 v[kTiles][2];  // [tile][half]: bytes [32q + 16 half, +16) of row g
};

// The chunk's weights for this lane; zeros past n or k (k % 16 == 0, so a
// 16-byte piece is wholly in or out).
__device__ __forceinline__ ChunkWeights load_chunk(const Params& p, int row0, int chunk, int g, int q) {
  ChunkWeights c;
  const int col = chunk * kChunk + 32 * q;
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int row = row0 + 8 * t + g;
    const std::uint8_t* src = p.w + static_cast<std::int64_t>(min(row, p.n - 1)) * p.k + col;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      c.v[t][h] = row < p.n && col + 16 * h < p.k ? load_weight(reinterpret_cast<const uint4*>(src + 16 * h))
                                                  : make_uint4(0, 0, 0, 0);
  }
  return c;
}

// Activations of `row` at the chunk's lane K [32q, 32q + 32): four 16-byte
// vectors of 8 bf16, zeros past m or k.
__device__ __forceinline__ void load_activations(const Params& p, int row, int chunk, int q, uint4 (&a)[4]) {
  const int col = chunk * kChunk + 32 * q;
  const auto* src = reinterpret_cast<const uint4*>(p.x + static_cast<std::int64_t>(min(row, p.m - 1)) * p.k + col);
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = row < p.m && col + 8 * i < p.k ? src[i] : make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ std::uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// kRowsAbove8: m > 8, so activation rows g + 8 are loaded too.
template <bool kRowsAbove8>
__global__ void __launch_bounds__(kMaxThreads) fp8_gemv_kernel(Params p) {
  extern __shared__ float s_partial[];  // [stripes][parts - 1][kTiles * 4][32]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, parts = p.parts;
  const int part = warp % parts, stripe = warp / parts, stripes = (blockDim.x >> 5) / parts;
  const int g = lane >> 2, q = lane & 3;
  const int row0 = (blockIdx.x * stripes + stripe) * kRowsPerStripe;
  const int chunk_begin = part * p.num_chunks / parts, chunk_end = (part + 1) * p.num_chunks / parts;
  pdl_launch_dependents();
  // The first chunk's weights before the wait: they never change.
  ChunkWeights cur{};
  if (chunk_begin < chunk_end) cur = load_chunk(p, row0, chunk_begin, g, q);
  pdl_wait();

  float acc[kTiles][4] = {};
  for (int chunk = chunk_begin; chunk < chunk_end; ++chunk) {
    ChunkWeights next{};
    if (chunk + 1 < chunk_end) next = load_chunk(p, row0, chunk + 1, g, q);
    uint4 a_lo[4], a_hi[4] = {};
    load_activations(p, g, chunk, q, a_lo);
    if constexpr (kRowsAbove8) load_activations(p, g + 8, chunk, q, a_hi);
    float block_acc[kTiles][4] = {};
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      // Activations: vector s / 2 holds K 8(s/2) .. +8 of the lane's 32; step s takes its words 2(s%2), +1.
      const int wi = 2 * (s % 2);
      const std::uint32_t a[4] = {word(a_lo[s / 2], wi), word(a_hi[s / 2], wi), word(a_lo[s / 2], wi + 1),
                                  word(a_hi[s / 2], wi + 1)};
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        // Weights: byte 4s..4s+3 of the lane's 32 is word s % 4 of half s / 4.
        const std::uint32_t bytes = word(cur.v[t][s / 4], s % 4);
        mma_16816(block_acc[t], a, e4m3x2_to_bf16x2(bytes), e4m3x2_to_bf16x2(bytes >> 16));
      }
    }
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      // A tile's 8 rows lie in one 128-row scale block.
      const float scale = p.w_scales[static_cast<std::int64_t>((row0 + 8 * t) / kChunk) * p.scale_row_stride + chunk];
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][i] += scale * block_acc[t][i];
    }
    cur = next;
  }

  if (part > 0) {
    float* mine = s_partial + (stripe * (parts - 1) + part - 1) * kTiles * 4 * 32;
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) mine[(t * 4 + i) * 32 + lane] = acc[t][i];
  }
  __syncthreads();
  if (part > 0) return;
  for (int other = 0; other < parts - 1; ++other) {
    const float* theirs = s_partial + (stripe * (parts - 1) + other) * kTiles * 4 * 32;
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][i] += theirs[(t * 4 + i) * 32 + lane];
  }
  // C fragment: i = 0, 1 at row g, columns 2q, 2q + 1 of the tile; i = 2, 3 at row g + 8.
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i / 2), col = row0 + 8 * t + 2 * q + i % 2;
      if (row < p.m && col < p.n) store_f(p.out, p.out_dt, static_cast<std::int64_t>(row) * p.n + col, acc[t][i]);
    }
}

// Blocks resident a multiprocessor for each block size (warps 1..16) of the
// instance for m rows: the launch's occupancy table, asked once.
const Fp8GemvOccupancy& occupancy_of(bool rows_above_8) {
  static const auto make = [](auto kernel) {
    Fp8GemvOccupancy o;
    int device = 0;
    SLUICE_CUDA_CHECK(cudaGetDevice(&device));
    SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&o.num_sms, cudaDevAttrMultiProcessorCount, device));
    for (int warps = 1; warps <= kFp8GemvMaxBlockWarps; ++warps) {
      const std::size_t smem = static_cast<std::size_t>(warps) * kTiles * 4 * 32 * sizeof(float);
      SLUICE_CUDA_CHECK(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o.blocks_per_sm[warps], kernel, warps * 32, smem));
    }
    return o;
  };
  static const Fp8GemvOccupancy above_8 = make(fp8_gemv_kernel<true>);
  static const Fp8GemvOccupancy up_to_8 = make(fp8_gemv_kernel<false>);
  return rows_above_8 ? above_8 : up_to_8;
}

}  // namespace

bool fp8_gemv_supports(std::int64_t m, std::int64_t n, std::int64_t k) {
  return m >= 1 && m <= kFp8GemvMaxRows && n >= 1 && k >= 16 && k % 16 == 0 && n * k < (1LL << 40) &&
         n < (1LL << 30) && k < (1LL << 30);
}

// Cost = waves x chunks a part x (1 + activation bytes / weight bytes a
// stripe pulls from L2), the least over parts 1..16 and stripes 1, 2, 4: the
// first term is the serial chain of a warp (a wave's warps stream
// together), the second what the stripes' shared activations save. Ties go
// to fewer warps. Session 14's sweep (docs/benchmarks.md) calibrates it.
Fp8GemvSplit fp8_gemv_split(std::int64_t m, std::int64_t n, std::int64_t k, const Fp8GemvOccupancy& occupancy) {
  const std::int64_t chunks = (k + kChunk - 1) / kChunk;
  const double activation_ratio = m > 8 ? 2.0 : 1.0;
  Fp8GemvSplit best{.k_parts = 1, .stripes = 1};
  double best_cost = 1e300;
  for (std::int32_t stripes : {1, 2, 4})
    for (std::int32_t parts = 1; parts <= std::min<std::int64_t>(chunks, kFp8GemvMaxBlockWarps / stripes); ++parts) {
      const std::int64_t per_sm = occupancy.blocks_per_sm[parts * stripes];
      if (per_sm < 1) continue;
      const std::int64_t blocks = (n + kRowsPerStripe * stripes - 1) / (kRowsPerStripe * stripes);
      const std::int64_t waves = (blocks + occupancy.num_sms * per_sm - 1) / (occupancy.num_sms * per_sm);
      const double cost = static_cast<double>(waves) * chunks / parts * (1.0 + activation_ratio / stripes);
      if (cost < best_cost * (1.0 - 1e-9)) {
        best_cost = cost;
        best = {.k_parts = parts, .stripes = stripes};
      }
    }
  return best;
}

void prepare_fp8_gemv() {
  (void)occupancy_of(false);
  (void)occupancy_of(true);
}

Fp8GemvSplit fp8_gemv_split_on_device(std::int64_t m, std::int64_t n, std::int64_t k) {
  return fp8_gemv_split(m, n, k, occupancy_of(m > 8));
}

void launch_fp8_gemv(const Fp8GemvArgs& a, const Launch& launch) {
  SLUICE_CHECK_MSG(fp8_gemv_supports(a.m, a.n, a.k), "fp8 GEMV: 1..16 rows and K a multiple of 16");
  SLUICE_CHECK(a.out_dt == Dt::bf16 || a.out_dt == Dt::f32);
  const int num_chunks = static_cast<int>((a.k + kChunk - 1) / kChunk);
  SLUICE_CHECK(a.w_scale_row_stride >= num_chunks);
  const bool rows_above_8 = a.m > 8;
  Fp8GemvSplit split = fp8_gemv_split_on_device(a.m, a.n, a.k);
  if (a.k_parts > 0) {
    split.k_parts = std::min(a.k_parts, num_chunks);
    split.stripes = std::max(1, std::min(split.stripes, kFp8GemvMaxBlockWarps / split.k_parts));
  }
  if (a.stripes > 0) split.stripes = a.stripes;
  SLUICE_CHECK(split.k_parts * split.stripes <= kFp8GemvMaxBlockWarps);
  const Params p{.x = static_cast<const __nv_bfloat16*>(a.x),
                 .w = a.w,
                 .w_scales = a.w_scales,
                 .out = a.out,
                 .m = static_cast<int>(a.m),
                 .n = static_cast<int>(a.n),
                 .k = static_cast<int>(a.k),
                 .scale_row_stride = static_cast<int>(a.w_scale_row_stride),
                 .num_chunks = num_chunks,
                 .parts = split.k_parts,
                 .out_dt = a.out_dt};
  const std::int64_t rows_per_block = kRowsPerStripe * split.stripes;
  const dim3 grid(static_cast<unsigned>((a.n + rows_per_block - 1) / rows_per_block));
  const dim3 block(static_cast<unsigned>(split.k_parts * split.stripes * 32));
  const std::size_t smem =
      static_cast<std::size_t>(split.stripes * (split.k_parts - 1)) * kTiles * 4 * 32 * sizeof(float);
  if (rows_above_8)
    launch_kernel(fp8_gemv_kernel<true>, grid, block, smem, launch, p);
  else
    launch_kernel(fp8_gemv_kernel<false>, grid, block, smem, launch, p);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
