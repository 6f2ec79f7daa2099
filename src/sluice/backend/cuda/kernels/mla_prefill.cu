// MLA prefill in the decompressed form (DeepSeek-V3): for one sequence and a
// group of heads, K_h = [c . W_UK_h^T | k_rope] and V_h = c . W_UV_h^T are
// materialised over the whole context by a GEMM (mla_attention.cpp), and the
// new rows attend causally (bottom-right: row i at position num_computed + i
// sees keys [0, num_computed + i]). Keys are contiguous positions here, not
// pages: the GEMM wrote them in order.
//
// Two kernels (CudaOptions::mla_kernels):
//   simple: a warp a (row, head), CUDA cores, any dims up to 256.
//   tensor_core (and wgmma, whose difference is decode's): QK 192 (128 + 64) / V 128 only; attention_prefill.cu's
//     FlashAttention-2 scheme and tile steps (flash_tile.cuh: mma.sync
//     m16n8k16, four warps of 2 x 16 rows, 128-row query tiles, 64-key K/V
//     tiles double-buffered by cp.async into padded shared memory) with K
//     gathered from two sources (k_nope from the decompressed kv, k_rope from
//     the shared rope keys) and V narrower than QK.
#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/flash_tile.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mla_common.cuh"
#include "sluice/backend/cuda/kernels/mla_kernels.h"
#include "sluice/backend/cuda/kernels/mma.cuh"

namespace sluice::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// --- simple ---
constexpr int kSimpleThreads = 128;
constexpr int kSimpleWarps = kSimpleThreads / 32;
constexpr int kSimpleQkPerLane = kMlaSimpleMaxQkDim / 32;
constexpr int kSimpleVPerLane = kMlaSimpleMaxVDim / 32;

// One block a (row, kSimpleWarps heads), a warp a head: an online softmax
// over keys [0, position], lanes holding dims lane + 32 j of q and of o.
__global__ void __launch_bounds__(kSimpleThreads) prefill_simple_kernel(MlaPrefillArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int g = blockIdx.y * kSimpleWarps + (threadIdx.x >> 5);
  if (g >= a.group_heads) return;
  const int row = blockIdx.x;
  const int position = a.num_computed + row;
  const int qk = a.nope_dim + a.rope_dim, kv_width = a.nope_dim + a.v_dim;
  const std::int64_t step_row = a.row_begin + row;
  const int head = a.head_begin + g;
  const auto* q = static_cast<const __nv_bfloat16*>(a.q) + (step_row * a.num_heads + head) * qk;
  const auto* kv = static_cast<const __nv_bfloat16*>(a.kv) + static_cast<std::int64_t>(g) * kv_width;
  const auto* k_rope = static_cast<const __nv_bfloat16*>(a.k_rope);
  const std::int64_t kv_stride = static_cast<std::int64_t>(a.group_heads) * kv_width;
  float q_reg[kSimpleQkPerLane];
#pragma unroll
  for (int j = 0; j < kSimpleQkPerLane; ++j) {
    const int d = lane + 32 * j;
    q_reg[j] = d < qk ? __bfloat162float(q[d]) : 0.0f;
  }
  float acc[kSimpleVPerLane];
#pragma unroll
  for (int j = 0; j < kSimpleVPerLane; ++j) acc[j] = 0.0f;
  OnlineSoftmax softmax;
  for (int key = 0; key <= position; ++key) {
    const __nv_bfloat16* kv_row = kv + key * kv_stride;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kSimpleQkPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < a.nope_dim)
        dot += q_reg[j] * __bfloat162float(kv_row[d]);
      else if (d < qk)
        dot += q_reg[j] * __bfloat162float(k_rope[static_cast<std::int64_t>(key) * a.rope_dim + d - a.nope_dim]);
    }
    const OnlineSoftmax::Step step = softmax.add(warp_sum(dot) * a.scale);
#pragma unroll
    for (int j = 0; j < kSimpleVPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < a.v_dim) acc[j] = acc[j] * step.correction + step.weight * __bfloat162float(kv_row[a.nope_dim + d]);
    }
  }
  auto* out = static_cast<__nv_bfloat16*>(a.out) + (step_row * a.num_heads + head) * a.v_dim;
  const float inv_sum = 1.0f / softmax.sum;
#pragma unroll
  for (int j = 0; j < kSimpleVPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < a.v_dim) out[d] = __float2bfloat16(acc[j] * inv_sum);
  }
}

// --- tensor cores ---
constexpr int kThreads = 128;  // four warps
constexpr int kMTiles = 2;     // m16 tiles a warp
constexpr int kBlockM = 4 * 16 * kMTiles;
constexpr int kBlockN = 64;
constexpr int kNope = 128, kRope = 64, kDv = 128;
constexpr int kDqk = kNope + kRope;
constexpr int kStrideQk = kDqk + 8;  // padded smem rows (elements): ldmatrix conflict-free
constexpr int kStrideV = kDv + 8;
constexpr int kSmemBytes = (kBlockM * kStrideQk + 2 * kBlockN * kStrideQk + 2 * kBlockN * kStrideV) * 2;

// One block a (head of the group, 128-row tile), longest key ranges first.
__global__ void __launch_bounds__(kThreads) prefill_mma_kernel(MlaPrefillArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  constexpr int kQkChunks = kDqk / 8;  // 16-byte chunks a row
  constexpr int kNopeChunks = kNope / 8;
  constexpr int kVChunks = kDv / 8;
  constexpr int kKSteps = kDqk / 16;
  constexpr int kNTilesS = kBlockN / 8;
  constexpr int kNTilesO = kDv / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* s_k = s_q + kBlockM * kStrideQk;  // [2][kBlockN][kStrideQk]
  __nv_bfloat16* s_v = s_k + 2 * kBlockN * kStrideQk;  // [2][kBlockN][kStrideV]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = blockIdx.x;
  const int num_row_tiles = (a.num_rows + kBlockM - 1) / kBlockM;
  const int tile_row = (num_row_tiles - 1 - static_cast<int>(blockIdx.y)) * kBlockM;
  const int num_q = min(kBlockM, a.num_rows - tile_row);
  const int first_pos = a.num_computed + tile_row;
  const int kv_end = first_pos + num_q;
  const int head = a.head_begin + g;
  const auto* q = static_cast<const __nv_bfloat16*>(a.q);
  const auto* kv = static_cast<const __nv_bfloat16*>(a.kv);
  const auto* k_rope = static_cast<const __nv_bfloat16*>(a.k_rope);
  const std::int64_t kv_stride = static_cast<std::int64_t>(a.group_heads) * (kNope + kDv);
  const std::int64_t head_offset = static_cast<std::int64_t>(g) * (kNope + kDv);

  for (int c = tid; c < kBlockM * kQkChunks; c += kThreads) {
    const int r = c / kQkChunks, col = (c % kQkChunks) * 8;
    const bool valid = r < num_q;
    const std::int64_t step_row = a.row_begin + tile_row + (valid ? r : 0);
    cp_async_16(s_q + r * kStrideQk + col, q + (step_row * a.num_heads + head) * kDqk + col, valid);
  }
  auto load_kv = [&](int tile, int buf) {
    __nv_bfloat16* dk = s_k + buf * kBlockN * kStrideQk;
    __nv_bfloat16* dv = s_v + buf * kBlockN * kStrideV;
    for (int c = tid; c < kBlockN * kQkChunks; c += kThreads) {
      const int r = c / kQkChunks, chunk = c % kQkChunks;
      const int key = tile * kBlockN + r;
      const bool valid = key < kv_end;
      const std::int64_t k = valid ? key : 0;
      const __nv_bfloat16* src = chunk < kNopeChunks ? kv + k * kv_stride + head_offset + chunk * 8
                                                     : k_rope + k * kRope + (chunk - kNopeChunks) * 8;
      cp_async_16(dk + r * kStrideQk + chunk * 8, src, valid);
    }
    for (int c = tid; c < kBlockN * kVChunks; c += kThreads) {
      const int r = c / kVChunks, chunk = c % kVChunks;
      const int key = tile * kBlockN + r;
      const bool valid = key < kv_end;
      const std::int64_t k = valid ? key : 0;
      cp_async_16(dv + r * kStrideV + chunk * 8, kv + k * kv_stride + head_offset + kNope + chunk * 8, valid);
    }
  };
  load_kv(0, 0);
  cp_async_commit();

  const int num_tiles = (kv_end + kBlockN - 1) / kBlockN;
  const int warp_row = warp * 16 * kMTiles;
  const int warp_first_pos = first_pos + warp_row;
  const float scale_log2 = a.scale * kLog2e;

  float o_acc[kMTiles][kNTilesO][4];
  float m_run[kMTiles][2], l_run[kMTiles][2];
  flash::start_rows(o_acc, m_run, l_run);

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait_all();
    __syncthreads();
    if (tile + 1 < num_tiles) {
      load_kv(tile + 1, (tile + 1) & 1);
      cp_async_commit();
    }
    const int key0 = tile * kBlockN;
    // Causal: a warp whose last row precedes the tile sees none of its keys.
    if (key0 > warp_first_pos + 16 * kMTiles - 1) continue;
    const __nv_bfloat16* sk = s_k + (tile & 1) * kBlockN * kStrideQk;
    const __nv_bfloat16* sv = s_v + (tile & 1) * kBlockN * kStrideV;

    float s[kMTiles][kNTilesS][4];
    flash::score_tile<kMTiles, kNTilesS, kKSteps, kStrideQk, kStrideQk>(s, s_q, warp_row, sk, lane);
    flash::softmax_tile(s, o_acc, m_run, l_run, key0, warp_first_pos, scale_log2, lane);
    flash::pv_tile<kMTiles, kNTilesS, kNTilesO, kStrideV>(s, o_acc, sv, lane);
  }
  auto* out = static_cast<__nv_bfloat16*>(a.out);
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
      __nv_bfloat16* dst = out + (static_cast<std::int64_t>(a.row_begin + tile_row + r) * a.num_heads + head) * kDv;
#pragma unroll
      for (int n = 0; n < kNTilesO; ++n) {
        const int col = n * 8 + (lane % 4) * 2;
        *reinterpret_cast<__nv_bfloat162*>(dst + col) =
            __floats2bfloat162_rn(o_acc[mt][n][2 * h] * inv, o_acc[mt][n][2 * h + 1] * inv);
      }
    }
  }
}

}  // namespace

bool mla_prefill_mma_supports(std::int32_t nope_dim, std::int32_t rope_dim, std::int32_t v_dim) {
  return nope_dim == kNope && rope_dim == kRope && v_dim == kDv;
}

void launch_mla_prefill(const MlaPrefillArgs& args, MlaKernels kernels, const Launch& launch) {
  if (args.num_rows == 0 || args.group_heads == 0) return;
  if (kernels != MlaKernels::simple && mla_prefill_mma_supports(args.nope_dim, args.rope_dim, args.v_dim)) {
    static bool attribute_set = false;  // once per process: the limit is per kernel
    if (!attribute_set) {
      SLUICE_CUDA_CHECK(
          cudaFuncSetAttribute(prefill_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
      attribute_set = true;
    }
    const dim3 grid(args.group_heads, (args.num_rows + kBlockM - 1) / kBlockM);
    launch_kernel(prefill_mma_kernel, grid, dim3(kThreads), kSmemBytes, launch, args);
    SLUICE_CUDA_CHECK_LAUNCH();
    return;
  }
  SLUICE_CHECK(args.nope_dim + args.rope_dim <= kMlaSimpleMaxQkDim && args.v_dim <= kMlaSimpleMaxVDim);
  const dim3 grid(args.num_rows, (args.group_heads + kSimpleWarps - 1) / kSimpleWarps);
  launch_kernel(prefill_simple_kernel, grid, dim3(kSimpleThreads), 0, launch, args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
