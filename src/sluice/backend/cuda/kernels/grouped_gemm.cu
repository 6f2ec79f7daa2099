// Grouped GEMM on tensor cores for the routed experts (and the FP8 dense
// matmul at decode sizes): a block computes tile_rows slots of one group
// against 64 output columns, streaming K in 64-wide stages through a
// 3-stage cp.async pipeline; 4 warps, each 16 columns (32 under swiglu,
// gate and up), mma.sync m16n8k16 bf16 with f32 accumulators.
//
// Why this shape: at decode every touched expert holds a few slots, so a
// block is a weight stream (tile_rows 16 wastes tensor-core work, not
// bandwidth); at prefill an expert holds ~100+ slots and tile_rows 64
// reuses each weight tile 64 times. FP8 weights travel as bytes (half the
// traffic) and are dequantized as fragments are read from shared memory:
// fp8 -> f32, times the 128x128 block's scale, rounded to bf16, exactly the
// bf16 weight the upload of the dequantized checkpoint holds.
//
// The grid covers an upper bound of tiles (moe_max_tiles); tiles past the
// routing's last exit at once, so no count ever goes to the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/moe_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTileCols = 64;  // output columns a block computes (each half under swiglu)
constexpr int kTileK = 64;
constexpr int kStages = 3;
constexpr int kBlockScale = 128;  // FP8 weight scale blocks are 128 x 128
constexpr int kAPitchBytes = kTileK * 2 + 16;  // padded rows: conflict-free fragment loads

template <bool kFp8>
constexpr int b_pitch_bytes() {
  return kFp8 ? kTileK + 16 : kTileK * 2 + 16;
}

template <int kTileRows, bool kSwiglu, bool kFp8>
struct Shape {
  static constexpr int kBRows = kSwiglu ? 2 * kTileCols : kTileCols;
  static constexpr int kAStageBytes = kTileRows * kAPitchBytes;
  static constexpr int kBStageBytes = kBRows * b_pitch_bytes<kFp8>();
  static constexpr int kStageBytes = kAStageBytes + kBStageBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static constexpr int kMTiles = kTileRows / 16;
  static constexpr int kNTiles = kSwiglu ? 4 : 2;  // n8 tiles a warp holds
};

__device__ __forceinline__ std::uint32_t dequantized_pair(const unsigned char* p, float scale) {
  const __nv_fp8x2_storage_t bits = *reinterpret_cast<const __nv_fp8x2_storage_t*>(p);
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(bits, __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&raw));
  return pack_bf16(f.x * scale, f.y * scale);
}

template <int kTileRows, bool kSwiglu, bool kFp8>
__global__ void __launch_bounds__(kThreads) grouped_gemm_kernel(GroupedGemmArgs a) {
  using S = Shape<kTileRows, kSwiglu, kFp8>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int x_rows[kTileRows];
  pdl_launch_dependents();
  pdl_wait();
  const int tile = blockIdx.x;
  int group = 0, first_slot = 0, end_slot = 0;
  if (a.tile_expert != nullptr) {
    group = a.tile_expert[tile];
    if (group < 0) return;
    first_slot = a.tile_first_slot[tile];
    end_slot = min(first_slot + kTileRows, a.expert_offsets[group + 1]);
  } else {
    first_slot = tile * kTileRows;
    if (first_slot >= a.num_slots) return;
    end_slot = min(first_slot + kTileRows, a.num_slots);
  }
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const std::int64_t n = a.n, k = a.k;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.y) * kTileCols;
  const std::int64_t group_rows = kSwiglu ? 2 * n : n;
  // First weight row of each half (gate, up) of this block's columns.
  const std::int64_t w_row0 = group * group_rows + n0;
  const std::int64_t w_row1 = w_row0 + n;
  for (int r = tid; r < kTileRows; r += kThreads) {
    const int slot = first_slot + r;
    x_rows[r] = slot < end_slot ? (a.row_of_slot != nullptr ? a.row_of_slot[slot] : slot) : -1;
  }
  __syncthreads();

  const auto* x = static_cast<const unsigned char*>(a.x);
  const auto* w = static_cast<const unsigned char*>(a.w);
  constexpr int kWBytes = kFp8 ? 1 : 2;
  auto load_stage = [&](int stage, int k_tile) {
    unsigned char* a_s = smem + stage * S::kStageBytes;
    unsigned char* b_s = a_s + S::kAStageBytes;
    const std::int64_t k0 = static_cast<std::int64_t>(k_tile) * kTileK;
    constexpr int kAChunks = kTileRows * (kTileK * 2 / 16);
    for (int c = tid; c < kAChunks; c += kThreads) {
      const int r = c / (kTileK * 2 / 16), chunk = c % (kTileK * 2 / 16);
      const std::int64_t col = k0 + chunk * 8;
      const bool valid = x_rows[r] >= 0 && col < k;
      const unsigned char* src = valid ? x + (static_cast<std::int64_t>(x_rows[r]) * k + col) * 2 : x;
      cp_async_16(a_s + r * kAPitchBytes + chunk * 16, src, valid);
    }
    constexpr int kChunksPerRow = kTileK * kWBytes / 16;
    constexpr int kBChunks = S::kBRows * kChunksPerRow;
    for (int c = tid; c < kBChunks; c += kThreads) {
      const int r = c / kChunksPerRow, chunk = c % kChunksPerRow;
      const int half = r / kTileCols, r_in_half = r % kTileCols;
      const std::int64_t col = k0 + chunk * (16 / kWBytes);
      const bool valid = n0 + r_in_half < n && col < k;
      const std::int64_t w_row = (half == 0 ? w_row0 : w_row1) + r_in_half;
      const unsigned char* src = valid ? w + (w_row * k + col) * kWBytes : w;
      cp_async_16(b_s + r * b_pitch_bytes<kFp8>() + chunk * 16, src, valid);
    }
  };

  float acc[S::kMTiles][S::kNTiles][4];
#pragma unroll
  for (int mt = 0; mt < S::kMTiles; ++mt)
#pragma unroll
    for (int j = 0; j < S::kNTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][j][i] = 0.0f;

  const int num_k_tiles = static_cast<int>((k + kTileK - 1) / kTileK);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  const int group_id = lane >> 2, pair = 2 * (lane & 3);
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const unsigned char* a_s = smem + (kt % kStages) * S::kStageBytes;
    const unsigned char* b_s = a_s + S::kAStageBytes;
    float scale[2] = {1.0f, 1.0f};
    if constexpr (kFp8) {
      const std::int64_t scale_col = static_cast<std::int64_t>(kt) * kTileK / kBlockScale;
      scale[0] = a.w_scales[w_row0 / kBlockScale * a.w_scale_row_stride + scale_col];
      if constexpr (kSwiglu) scale[1] = a.w_scales[w_row1 / kBlockScale * a.w_scale_row_stride + scale_col];
    }
#pragma unroll
    for (int ks = 0; ks < kTileK / 16; ++ks) {
      const int kk = ks * 16 + pair;
      std::uint32_t frag_a[S::kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < S::kMTiles; ++mt) {
        const unsigned char* row_lo = a_s + (mt * 16 + group_id) * kAPitchBytes;
        const unsigned char* row_hi = row_lo + 8 * kAPitchBytes;
        frag_a[mt][0] = *reinterpret_cast<const std::uint32_t*>(row_lo + kk * 2);
        frag_a[mt][1] = *reinterpret_cast<const std::uint32_t*>(row_hi + kk * 2);
        frag_a[mt][2] = *reinterpret_cast<const std::uint32_t*>(row_lo + (kk + 8) * 2);
        frag_a[mt][3] = *reinterpret_cast<const std::uint32_t*>(row_hi + (kk + 8) * 2);
      }
#pragma unroll
      for (int j = 0; j < S::kNTiles; ++j) {
        const int half = j / 2;
        const int b_row = half * kTileCols + warp * 16 + (j % 2) * 8 + group_id;
        const unsigned char* row = b_s + b_row * b_pitch_bytes<kFp8>();
        std::uint32_t b0, b1;
        if constexpr (kFp8) {
          b0 = dequantized_pair(row + kk, scale[half]);
          b1 = dequantized_pair(row + kk + 8, scale[half]);
        } else {
          b0 = *reinterpret_cast<const std::uint32_t*>(row + kk * 2);
          b1 = *reinterpret_cast<const std::uint32_t*>(row + (kk + 8) * 2);
        }
#pragma unroll
        for (int mt = 0; mt < S::kMTiles; ++mt) mma_16816(acc[mt][j], frag_a[mt], b0, b1);
      }
    }
    const int next = kt + kStages - 1;
    if (next < num_k_tiles) load_stage(next % kStages, next);
    cp_async_commit();
  }
  cp_async_wait_all();

#pragma unroll
  for (int mt = 0; mt < S::kMTiles; ++mt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const std::int64_t col = n0 + warp * 16 + j * 8 + pair;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int slot = first_slot + mt * 16 + group_id + 8 * h;
        if (slot >= end_slot) continue;
        float v[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float first = acc[mt][j][2 * h + i];
          if constexpr (kSwiglu) {
            const float up = acc[mt][j + 2][2 * h + i];
            v[i] = first / (1.0f + expf(-first)) * up;
          } else {
            v[i] = first;
          }
        }
        for (int i = 0; i < 2; ++i)
          if (col + i < n) store_f(a.out, a.out_dt, static_cast<std::int64_t>(slot) * n + col + i, v[i]);
      }
    }
}

template <int kTileRows, bool kSwiglu, bool kFp8>
void raise_smem_limit() {
  SLUICE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<kTileRows, kSwiglu, kFp8>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Shape<kTileRows, kSwiglu, kFp8>::kSmemBytes));
}

template <int kTileRows>
void raise_smem_limits() {
  raise_smem_limit<kTileRows, false, false>();
  raise_smem_limit<kTileRows, false, true>();
  raise_smem_limit<kTileRows, true, false>();
  raise_smem_limit<kTileRows, true, true>();
}

template <int kTileRows, bool kSwiglu, bool kFp8>
void launch_variant(const GroupedGemmArgs& a, const Launch& launch) {
  using S = Shape<kTileRows, kSwiglu, kFp8>;
  auto* kernel = grouped_gemm_kernel<kTileRows, kSwiglu, kFp8>;
  const std::int64_t tiles =
      a.tile_expert != nullptr ? a.max_tiles : (a.num_slots + kTileRows - 1) / kTileRows;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>((a.n + kTileCols - 1) / kTileCols));
  launch_kernel(kernel, grid, dim3(kThreads), S::kSmemBytes, launch, a);
  SLUICE_CUDA_CHECK_LAUNCH();
}

template <bool kSwiglu, bool kFp8>
void launch_rows(const GroupedGemmArgs& a, const Launch& launch) {
  if (a.tile_rows == 16)
    launch_variant<16, kSwiglu, kFp8>(a, launch);
  else
    launch_variant<64, kSwiglu, kFp8>(a, launch);
}

}  // namespace

void prepare_grouped_gemm() {
  raise_smem_limits<16>();
  raise_smem_limits<64>();
}

std::int32_t grouped_gemm_tile_rows(std::int64_t num_slots, std::int64_t num_groups) {
  return num_slots <= 16 * num_groups ? 16 : 64;
}

bool grouped_gemm_supports(std::int64_t k, bool w_fp8) { return k > 0 && k % (w_fp8 ? 16 : 8) == 0; }

void launch_grouped_gemm(const GroupedGemmArgs& a, const Launch& launch) {
  SLUICE_CHECK(a.tile_rows == 16 || a.tile_rows == 64);
  SLUICE_CHECK(grouped_gemm_supports(a.k, a.w_fp8));
  SLUICE_CHECK(a.out_dt == Dt::bf16 || a.out_dt == Dt::f32);
  const bool swiglu = a.epilogue == GroupedEpilogue::swiglu;
  // FP8: a block's 64 rows (each half) and 64-wide K stages lie inside one
  // scale block when groups (and the up half) start on a block row.
  const bool groups_aligned = a.n % kBlockScale == 0 || (a.tile_expert == nullptr && !swiglu);
  SLUICE_CHECK(!a.w_fp8 || (a.w_scales != nullptr && groups_aligned));
  const std::int64_t tiles = a.tile_expert != nullptr ? a.max_tiles : a.num_slots;
  if (tiles == 0 || a.n == 0) return;
  if (swiglu && a.w_fp8)
    launch_rows<true, true>(a, launch);
  else if (swiglu)
    launch_rows<true, false>(a, launch);
  else if (a.w_fp8)
    launch_rows<false, true>(a, launch);
  else
    launch_rows<false, false>(a, launch);
}

}  // namespace sluice::cuda
