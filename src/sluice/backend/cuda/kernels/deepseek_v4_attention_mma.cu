// DeepSeek-V4 sparse attention with sinks on tensor cores
// (launch_v4_sparse_attention_mma, deepseek_v4_kernels.h): the same op as
// deepseek_v4_attention.cu, which stays as its reference. The heads of a row
// share their keys (K = V, the gathered 512-wide latents), so the heads are
// the MMA's M dimension, as in MLA decode (mla_decode_mma.cu, whose tiling
// this follows; mma.sync m16n8k16 bf16 -> f32).
//
// One block (8 warps) a (query row, 64-head group). The block's queries
// [64, 512] sit in shared memory; tiles of 32 of the row's gathered latents
// stream in by cp.async through a ring of kStages buffers, two tiles ahead.
// Per tile:
//   S = Q K^T [64, 32]: warp w takes heads 16 (w % 4) and keys 16 (w / 4);
//   the softmax runs over shared memory, four threads a head, each head's
//   running max and sum starting from its sink (max = sink, sum = 1: the sink
//   sits in the denominator only);
//   O += P V [64, 512]: warp w owns heads 16 (w % 4) and dims 256 (w / 4),
//   128 f32 accumulators a thread. P is split into two bf16 terms
//   (p = hi + lo to 2^-17 of p) and both are multiplied: a bf16 P alone would
//   err by 2^-9 of each weight, far above the f32 reference's bound.
// Then O / sum, the inverse rope of the tail, out_dt.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/backend/cuda/kernels/latent_decode_tile.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;  // eight warps
constexpr int kHeads = 64;     // heads a block (M)
constexpr int kBlockN = 32;    // latents a tile
constexpr int kStages = 3;     // tiles in the ring: the one computed on and two in flight
constexpr int kWidth = kV4LatentDim;
constexpr int kStride = kWidth + 8;        // padded smem row (elements): ldmatrix conflict-free
constexpr int kScoreStride = kBlockN + 4;  // f32
constexpr int kPStride = kBlockN + 8;      // bf16
constexpr int kChunks = kWidth / 8;        // 16-byte chunks a row
constexpr int kDimsPerWarp = kWidth / 2;   // O columns a warp owns
constexpr int kNTilesO = kDimsPerWarp / 8;
constexpr float kLog2e = 1.4426950408889634f;

constexpr int kQBytes = kHeads * kStride * 2;
constexpr int kTileBytes = kBlockN * kStride * 2;
constexpr int kScoreBytes = kHeads * kScoreStride * 4;
constexpr int kPBytes = kHeads * kPStride * 2;
constexpr int kSmemBytes = kQBytes + kStages * kTileBytes + kScoreBytes + 2 * kPBytes + 3 * kHeads * 4;
static_assert(kQBytes % 16 == 0 && kTileBytes % 16 == 0 && kScoreBytes % 16 == 0 && kPBytes % 16 == 0);

__global__ void __launch_bounds__(kThreads, 1) v4_sparse_attention_mma_kernel(V4SparseAttentionArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  auto* s_tiles = reinterpret_cast<__nv_bfloat16*>(smem_raw + kQBytes);  // [kStages][kBlockN][kStride]
  unsigned char* after_tiles = smem_raw + kQBytes + kStages * kTileBytes;
  auto* s_scores = reinterpret_cast<float*>(after_tiles);
  auto* s_p_hi = reinterpret_cast<__nv_bfloat16*>(after_tiles + kScoreBytes);
  auto* s_p_lo = reinterpret_cast<__nv_bfloat16*>(after_tiles + kScoreBytes + kPBytes);
  auto* s_max = reinterpret_cast<float*>(after_tiles + kScoreBytes + 2 * kPBytes);
  float* s_sum = s_max + kHeads;
  float* s_correction = s_sum + kHeads;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int row = blockIdx.x, first_head = blockIdx.y * kHeads;
  const auto* q = static_cast<const __nv_bfloat16*>(a.q) + (static_cast<std::int64_t>(row) * a.num_heads + first_head) * kWidth;
  const auto* kv = static_cast<const __nv_bfloat16*>(a.kv);
  const int num_keys = a.num_keys[row];
  const std::int32_t* key_rows = a.key_rows + static_cast<std::int64_t>(row) * a.max_keys;

  // Queries of heads past num_heads are zeros: finite scores, never written.
  for (int c = tid; c < kHeads * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = first_head + r < a.num_heads;
    cp_async_16(s_q + r * kStride + col, q + (valid ? static_cast<std::int64_t>(r) * kWidth + col : 0), valid);
  }
  auto load_tile = [&](int tile, int buf) {
    __nv_bfloat16* dst = s_tiles + buf * kBlockN * kStride;
    for (int c = tid; c < kBlockN * kChunks; c += kThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const int key = tile * kBlockN + r;
      const bool valid = key < num_keys;
      const std::int64_t offset = valid ? static_cast<std::int64_t>(key_rows[key]) * kWidth + col : 0;
      cp_async_16(dst + r * kStride + col, kv + offset, valid);
    }
  };
  // Commit groups: {Q, tile 0}, {tile 1}, then one a loop iteration (empty
  // past the last tile), so "all but the newest group" is always the tile
  // about to be used.
  const int num_tiles = (num_keys + kBlockN - 1) / kBlockN;
  if (num_tiles > 0) load_tile(0, 0);
  cp_async_commit();
  if (num_tiles > 1) load_tile(1, 1);
  cp_async_commit();
  if (tid < kHeads) {
    const int head = first_head + tid;
    s_max[tid] = head < a.num_heads ? a.sinks[head] * kLog2e : 0.0f;  // log2 units, as the scores below
    s_sum[tid] = 1.0f;                                                 // the sink's own exp(sink - max)
  }

  const int s_rows = 16 * (warp % 4), s_keys = 16 * (warp / 4);            // this warp's S block
  const int o_rows = 16 * (warp % 4), o_dims = kDimsPerWarp * (warp / 4);  // and O block
  const float scale_log2 = a.softmax_scale * kLog2e;
  float o_acc[kNTilesO][4];
#pragma unroll
  for (int n = 0; n < kNTilesO; ++n)
#pragma unroll
    for (int k = 0; k < 4; ++k) o_acc[n][k] = 0.0f;

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<1>();
    // Also: every warp is done with tile - 1, whose buffer the next load reuses.
    __syncthreads();
    if (tile + 2 < num_tiles) load_tile(tile + 2, (tile + 2) % kStages);
    cp_async_commit();
    const __nv_bfloat16* kt = s_tiles + (tile % kStages) * kBlockN * kStride;

    // S block [16 heads, 16 keys] over the 512 dims.
    warp_score_block<kWidth, kStride, kScoreStride>(s_q, kt, s_rows, s_keys, lane, s_scores);
    __syncthreads();

    // Online softmax: four threads a head, eight keys each.
    {
      const int head = tid / 4, part = tid % 4;
      const int tile_key0 = tile * kBlockN;
      const float old_max = s_max[head];
      float x[8];
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int key = part * 8 + j;
        x[j] = tile_key0 + key < num_keys ? s_scores[head * kScoreStride + key] * scale_log2 : -INFINITY;
        tile_max = fmaxf(tile_max, x[j]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(old_max, tile_max);  // finite: it starts at the sink
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p = exp2f(x[j] - new_max);
        const __nv_bfloat16 hi = __float2bfloat16(p);
        const __nv_bfloat16 lo = __float2bfloat16(p - __bfloat162float(hi));
        s_p_hi[head * kPStride + part * 8 + j] = hi;
        s_p_lo[head * kPStride + part * 8 + j] = lo;
        sum += __bfloat162float(hi) + __bfloat162float(lo);  // the sum of what P V adds up
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      __syncwarp();
      if (part == 0) {
        const float correction = exp2f(old_max - new_max);
        s_max[head] = new_max;
        s_sum[head] = s_sum[head] * correction + sum;
        s_correction[head] = correction;
      }
    }
    __syncthreads();

    // O block [16 heads, 256 dims] += (P_hi + P_lo) [16, 32] V [32, 256].
    rescale_output_block(o_acc, s_correction, o_rows, lane);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      std::uint32_t p_hi[4], p_lo[4];
      ldmatrix_x4(p_hi, s_p_hi + (o_rows + (lane % 16)) * kPStride + kk * 16 + (lane / 16) * 8);
      ldmatrix_x4(p_lo, s_p_lo + (o_rows + (lane % 16)) * kPStride + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int n = 0; n < kNTilesO; n += 2) {
        std::uint32_t b[4];
        ldmatrix_x4_trans(b, kt + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride + o_dims + n * 8 +
                                 (lane / 16) * 8);
        mma_16816(o_acc[n], p_hi, b[0], b[1]);
        mma_16816(o_acc[n], p_lo, b[0], b[1]);
        mma_16816(o_acc[n + 1], p_hi, b[2], b[3]);
        mma_16816(o_acc[n + 1], p_lo, b[2], b[3]);
      }
    }
  }
  cp_async_wait_all();  // the trailing empty groups (and a row without keys' queries)
  __syncthreads();

  // O / sum, the inverse rope of the tail (pairs (d, d + 1), d even), out_dt.
  const int rope_begin = kWidth - a.rope.rope_dim;
  const float position = a.rope.inv_freq != nullptr ? static_cast<float>(a.positions[row]) : 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int local = o_rows + lane / 4 + h * 8;
    const int head = first_head + local;
    if (head >= a.num_heads) continue;
    const float inv_sum = 1.0f / s_sum[local];
    const std::int64_t out_base = (static_cast<std::int64_t>(row) * a.num_heads + head) * kWidth;
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n) {
      const int d = o_dims + n * 8 + (lane % 4) * 2;
      float even = o_acc[n][2 * h] * inv_sum, odd = o_acc[n][2 * h + 1] * inv_sum;
      if (a.rope.inv_freq != nullptr && d >= rope_begin) {
        // The inverse rotation (the reference's rope_tail(..., inverse = true)).
        const float angle = a.rope.inv_freq[(d - rope_begin) / 2] * position;
        const float c = cosf(angle) * a.rope.cos_sin_scale, sn = -sinf(angle) * a.rope.cos_sin_scale;
        const float e = even * c - odd * sn, o = odd * c + even * sn;
        even = e;
        odd = o;
      }
      store_f(a.out, a.out_dt, out_base + d, even);
      store_f(a.out, a.out_dt, out_base + d + 1, odd);
    }
  }
}

}  // namespace

void launch_v4_sparse_attention_mma(const V4SparseAttentionArgs& args, cudaStream_t stream) {
  check_v4_sparse_attention_args(args);
  SLUICE_CHECK(reinterpret_cast<std::uintptr_t>(args.q) % 16 == 0 && reinterpret_cast<std::uintptr_t>(args.kv) % 16 == 0);
  if (args.rows == 0) return;
  static const bool configured = [] {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(v4_sparse_attention_mma_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)configured;
  const int head_blocks = (args.num_heads + kHeads - 1) / kHeads;
  SLUICE_CHECK(head_blocks <= 65535);
  const dim3 grid(static_cast<unsigned>(args.rows), static_cast<unsigned>(head_blocks));
  v4_sparse_attention_mma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
