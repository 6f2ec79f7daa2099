// Causal paged attention for prefill chunks on tensor cores (FlashAttention-2
// style, mma.sync m16n8k16 bf16 with f32 accumulation; sm_80+ instructions,
// run here on sm_90a).
//
// One block per (query head, tile of 128 query rows of one sequence); four
// warps own 32 rows each. Queries sit at positions [p, p + n) of their
// sequence and read keys [0, position] from the paged cache, so a chunk with a
// cached prefix is the same code as a fresh prompt. K/V tiles of 32 keys are
// gathered page by page with cp.async into padded shared memory (row stride
// D + 8 keeps ldmatrix conflict-free), double-buffered. Keys past the last
// query are zero-filled, never read from unwritten pages (which may hold NaN).
// The warp-specialised warpgroup-MMA kernel for head_dim 128
// (attention_prefill_wgmma_ws.cu) runs whole tiles and split pieces instead
// when CudaOptions::prefill_attention asks for it.
//
// Split pieces (kSplit): a short chunk over a long cached prefix has few tiles,
// each walking the whole prefix on one SM. Such a tile's keys are cut into
// pieces (all starting at or below the tile's first position, so every row sees
// a key in each), one block a piece writes its normalised f32 output and
// log2-sum-exp, and merge_kernel combines them.
#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/flash_tile.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/prefill_params.cuh"
#include "sluice/backend/prefill_split_plan.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 128;  // four warps
// Two m16 tiles per warp, 64 keys per tile: 128 query rows per block.
constexpr int kMTiles = 2;
constexpr int kBlockN = 64;
static_assert(4 * 16 * kMTiles == kPrefillTileRows, "host tiling must match the kernel");
static_assert(kPrefillSplitKeyAlign % kBlockN == 0, "split pieces must start on a key tile");
constexpr float kLog2e = 1.4426950408889634f;


// kMTiles m16 tiles per warp: two share every K and V fragment loaded from
// shared memory, which halves shared-memory traffic per flop (the limit of
// the one-tile version, measured at ~150 TFLOP/s on the H200). Q fragments
// are re-read from shared memory at every k-step, which frees the registers
// for 64-key tiles: 256 TFLOP/s at 32k where Q held in registers over 32-key
// tiles (deleted) read 218 (run 9; 1.17x at 8k and 32k, MHA and GQA, S3-p1).
template <int D, bool kSplit>
__global__ void __launch_bounds__(kThreads) prefill_kernel(StepDeviceView step, PrefillParams p) {
  pdl_launch_dependents();
  pdl_wait();
  constexpr int kBlockM = 4 * 16 * kMTiles;
  constexpr int kStride = D + 8;        // padded smem row, in elements
  constexpr int kChunksPerRow = D / 8;  // 16-byte chunks per row
  constexpr int kKSteps = D / 16;       // mma k-steps over head_dim (S = Q K^T)
  constexpr int kNTilesS = kBlockN / 8;
  constexpr int kNTilesO = D / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* s_k = s_q + kBlockM * kStride;  // [2][kBlockN][kStride]
  __nv_bfloat16* s_v = s_k + 2 * kBlockN * kStride;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int head = blockIdx.x;
  const std::int32_t* item =
      kSplit ? step.prefill_split_pieces + 4 * blockIdx.y : step.prefill_tiles + 2 * blockIdx.y;
  const int seq = item[0];
  const int tile_row = item[1];
  const int seq_rows = step.seq_num_rows[seq];
  const int row_base = step.seq_row_begin[seq] + tile_row;
  const int num_q = min(kBlockM, seq_rows - tile_row);
  const int first_pos = step.seq_num_computed[seq] + tile_row;
  // Keys [key_begin, kv_end); a piece's bounds are multiples of kBlockN but its last.
  const int key_begin = kSplit ? item[2] : 0;
  const int kv_end = kSplit ? min(item[3], first_pos + num_q) : first_pos + num_q;
  const int kv_head = head / (p.num_q_heads / p.num_kv_heads);
  const std::int32_t* table = step.block_tables + step.seq_block_offset[seq];
  const std::int64_t key_stride = static_cast<std::int64_t>(p.num_kv_heads) * D;

  // Q tile.
  for (int c = tid; c < kBlockM * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const bool valid = r < num_q;
    const __nv_bfloat16* src =
        p.q + (static_cast<std::int64_t>(valid ? row_base + r : row_base) * p.num_q_heads + head) * D +
        col;
    cp_async_16(s_q + r * kStride + col, src, valid);
  }
  auto load_kv = [&](int tile, int buf) {
    __nv_bfloat16* dk = s_k + buf * kBlockN * kStride;
    __nv_bfloat16* dv = s_v + buf * kBlockN * kStride;
    for (int c = tid; c < kBlockN * kChunksPerRow; c += kThreads) {
      const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      const int key = tile * kBlockN + r;
      const bool valid = key < kv_end;
      std::int64_t off = 0;
      if (valid) {
        const std::int64_t slot =
            static_cast<std::int64_t>(table[key / p.block_size]) * p.block_size + key % p.block_size;
        off = slot * key_stride + kv_head * D + col;
      }
      cp_async_16(dk + r * kStride + col, p.k_cache + off, valid);
      cp_async_16(dv + r * kStride + col, p.v_cache + off, valid);
    }
  };
  const int first_tile = key_begin / kBlockN;
  load_kv(first_tile, first_tile & 1);
  cp_async_commit();

  const int num_tiles = (kv_end + kBlockN - 1) / kBlockN;
  // This warp's first row; each m-tile gives a thread rows lane/4 and lane/4 + 8.
  const int warp_row = warp * 16 * kMTiles;
  const int warp_first_pos = first_pos + warp_row;

  float o_acc[kMTiles][kNTilesO][4];
  float m_run[kMTiles][2], l_run[kMTiles][2];
  flash::start_rows(o_acc, m_run, l_run);

  for (int tile = first_tile; tile < num_tiles; ++tile) {
    cp_async_wait_all();
    __syncthreads();
    if (tile + 1 < num_tiles) {
      load_kv(tile + 1, (tile + 1) & 1);
      cp_async_commit();
    }
    const int key0 = tile * kBlockN;
    // Rows of this warp that see no key of this tile contribute nothing; a warp
    // whose first row precedes the tile skips it (causal: all later keys too).
    if (key0 > warp_first_pos + 16 * kMTiles - 1) continue;
    const __nv_bfloat16* sk = s_k + (tile & 1) * kBlockN * kStride;
    const __nv_bfloat16* sv = s_v + (tile & 1) * kBlockN * kStride;

    float s[kMTiles][kNTilesS][4];
    flash::score_tile<kMTiles, kNTilesS, kKSteps, kStride, kStride>(s, s_q, warp_row, sk, lane);
    flash::softmax_tile(s, o_acc, m_run, l_run, key0, warp_first_pos, p.scale_log2, lane);
    // O += P V: P's accumulator layout is the A fragment layout of the next mma.
    flash::pv_tile<kMTiles, kNTilesS, kNTilesO, kStride>(s, o_acc, sv, lane);
  }
  // Row sums are partial per lane: finish them across the four lanes of a row.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[mt][h] += __shfl_xor_sync(0xffffffffu, l_run[mt][h], 1);
      l_run[mt][h] += __shfl_xor_sync(0xffffffffu, l_run[mt][h], 2);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_row + mt * 16 + lane / 4 + h * 8;
      if (r >= num_q) continue;
      const float inv = 1.0f / l_run[mt][h];
      if constexpr (kSplit) {
        const std::int64_t slot = (static_cast<std::int64_t>(blockIdx.y) * p.num_q_heads + head) * kBlockM + r;
        float* dst = p.partial_out + slot * D;
#pragma unroll
        for (int n = 0; n < kNTilesO; ++n) {
          const int col = n * 8 + (lane % 4) * 2;
          *reinterpret_cast<float2*>(dst + col) = make_float2(o_acc[mt][n][2 * h] * inv, o_acc[mt][n][2 * h + 1] * inv);
        }
        if (lane % 4 == 0) p.partial_lse[slot] = m_run[mt][h] + log2f(l_run[mt][h]);
        continue;
      }
      __nv_bfloat16* dst =
          p.out + (static_cast<std::int64_t>(row_base + r) * p.num_q_heads + head) * D;
#pragma unroll
      for (int n = 0; n < kNTilesO; ++n) {
        const int col = n * 8 + (lane % 4) * 2;
        *reinterpret_cast<__nv_bfloat162*>(dst + col) =
            __floats2bfloat162_rn(o_acc[mt][n][2 * h] * inv, o_acc[mt][n][2 * h + 1] * inv);
      }
    }
  }
}

// Combines a split tile's pieces: out = sum_i 2^(lse_i - max) o_i / sum_i 2^(lse_i - max).
// One block a (head, split tile, group of kMergeRows rows): a 128-row tile over
// 32 heads is 256 blocks, not 32 (one block a (head, tile) left 100 SMs idle
// and walked the pieces one dependent load at a time: 98 us a layer for
// 8 pieces of a 128-row chunk over 80k keys, 11% of the step; S8-1). The
// pieces' weights are computed once a row into shared memory, and each thread
// keeps a row's loads from every piece in flight together.
constexpr int kMergeRows = 16;
static_assert(kPrefillTileRows % kMergeRows == 0, "merge groups tile the query tile");

template <int D>
__global__ void __launch_bounds__(kThreads) merge_kernel(StepDeviceView step, PrefillParams p) {
  __shared__ float weight[kMaxPrefillSplitPieces][kMergeRows];  // 2^(lse_i - max) / sum
  pdl_launch_dependents();
  pdl_wait();
  const int pieces = step.prefill_split_pieces_per_tile;
  const int first_piece = blockIdx.y * pieces;
  const int head = blockIdx.x;
  const int seq = step.prefill_split_pieces[4 * first_piece];
  const int tile_row = step.prefill_split_pieces[4 * first_piece + 1];
  const int first_row = blockIdx.z * kMergeRows;
  const int num_q = min(kPrefillTileRows, step.seq_num_rows[seq] - tile_row);
  const int num_rows = min(kMergeRows, num_q - first_row);
  if (num_rows <= 0) return;
  const int row_base = step.seq_row_begin[seq] + tile_row;
  auto slot_of = [&](int piece, int r) {
    return (static_cast<std::int64_t>(first_piece + piece) * p.num_q_heads + head) * kPrefillTileRows + r;
  };
  if (threadIdx.x < num_rows) {
    const int r = first_row + static_cast<int>(threadIdx.x);
    float lse_max = -INFINITY;
    for (int i = 0; i < pieces; ++i) lse_max = fmaxf(lse_max, p.partial_lse[slot_of(i, r)]);
    float sum = 0.0f;
    for (int i = 0; i < pieces; ++i) {
      const float w = exp2f(p.partial_lse[slot_of(i, r)] - lse_max);
      weight[i][threadIdx.x] = w;
      sum += w;
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < pieces; ++i) weight[i][threadIdx.x] *= inv;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < num_rows * (D / 4); idx += kThreads) {
    const int r = idx / (D / 4), col = (idx % (D / 4)) * 4;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int i = 0; i < pieces; ++i) {
      const float w = weight[i][r];
      const float4 o = __ldcs(reinterpret_cast<const float4*>(p.partial_out + slot_of(i, first_row + r) * D + col));
      acc.x += w * o.x;
      acc.y += w * o.y;
      acc.z += w * o.z;
      acc.w += w * o.w;
    }
    __nv_bfloat16* dst = p.out + (static_cast<std::int64_t>(row_base + first_row + r) * p.num_q_heads + head) * D + col;
    reinterpret_cast<__nv_bfloat162*>(dst)[0] = __floats2bfloat162_rn(acc.x, acc.y);
    reinterpret_cast<__nv_bfloat162*>(dst)[1] = __floats2bfloat162_rn(acc.z, acc.w);
  }
}


template <int D>
void launch_merge(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch) {
  const PrefillParams p = prefill_params_of(step, args, D);
  launch_kernel(merge_kernel<D>,
                dim3(args.num_q_heads, step.num_prefill_split_pieces / step.prefill_split_pieces_per_tile,
                     kPrefillTileRows / kMergeRows),
                dim3(kThreads), 0, launch, step, p);
  SLUICE_CUDA_CHECK_LAUNCH();
}

template <int D, bool kSplit>
void launch_for_dim(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch) {
  const PrefillParams p = prefill_params_of(step, args, D);
  constexpr int smem_bytes = (kPrefillTileRows + 4 * kBlockN) * (D + 8) * 2;
  constexpr auto kernel = prefill_kernel<D, kSplit>;
  static bool attribute_set = false;  // once per process: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    attribute_set = true;
  }
  const int num_blocks = kSplit ? step.num_prefill_split_pieces : step.num_prefill_tiles;
  launch_kernel(kernel, dim3(args.num_q_heads, num_blocks), dim3(kThreads), smem_bytes, launch, step, p);
  SLUICE_CUDA_CHECK_LAUNCH();
  if constexpr (kSplit) launch_merge<D>(step, args, launch);
}

}  // namespace

bool prefill_kernel_supports(std::int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

PrefillAttention prefill_kernel_for(PrefillAttention asked, std::int32_t head_dim) {
  // cudnn is not a kernel of ours: the steps cuDNN does not take run wgmma_ws.
  if (uses_cudnn(asked)) asked = PrefillAttention::wgmma_ws;
  return asked != PrefillAttention::mma && prefill_wgmma_supports(head_dim) ? asked : PrefillAttention::mma;
}

void launch_attention_prefill(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch) {
  if (step.num_prefill_tiles == 0) return;
  switch (prefill_kernel_for(args.prefill_attention, args.head_dim)) {
    case PrefillAttention::wgmma_ws: launch_attention_prefill_wgmma_ws(step, args, launch); return;
    case PrefillAttention::mma: break;
    case PrefillAttention::cudnn:
    case PrefillAttention::automatic: SLUICE_CHECK_MSG(false, "prefill_kernel_for() never answers cudnn");
  }
  switch (args.head_dim) {
    case 64: launch_for_dim<64, false>(step, args, launch); break;
    case 128: launch_for_dim<128, false>(step, args, launch); break;
    default: SLUICE_CHECK_MSG(false, "prefill attention: unsupported head_dim");
  }
}

// Split pieces run on the kernel that runs whole tiles; one merge for both.
void launch_attention_prefill_split(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch) {
  if (step.num_prefill_split_pieces == 0) return;
  SLUICE_CHECK_MSG(args.prefill_split_workspace != nullptr, "split prefill: no workspace");
  switch (prefill_kernel_for(args.prefill_attention, args.head_dim)) {
    case PrefillAttention::wgmma_ws:
      launch_attention_prefill_wgmma_ws_split(step, args, launch);
      launch_merge<128>(step, args, launch);
      return;
    case PrefillAttention::mma: break;
    case PrefillAttention::cudnn:
    case PrefillAttention::automatic: SLUICE_CHECK_MSG(false, "prefill_kernel_for() never answers cudnn");
  }
  switch (args.head_dim) {
    case 64: launch_for_dim<64, true>(step, args, launch); break;
    case 128: launch_for_dim<128, true>(step, args, launch); break;
    default: SLUICE_CHECK_MSG(false, "split prefill attention: unsupported head_dim");
  }
}

std::int64_t prefill_split_workspace_bytes(const StepDeviceView& step, const AttentionArgs& args) {
  return static_cast<std::int64_t>(step.num_prefill_split_pieces) * args.num_q_heads * kPrefillTileRows *
         (args.head_dim + 1) * static_cast<std::int64_t>(sizeof(float));
}

}  // namespace sluice::cuda
