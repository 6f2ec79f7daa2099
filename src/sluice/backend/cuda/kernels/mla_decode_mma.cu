// MLA decode attention on tensor cores (CudaOptions::mla_kernels =
// tensor_core; latent 512 + rope 64): an MQA in which 64 heads of one decode
// row share every latent row, so the heads are the MMA's M dimension and
// each latent tile is loaded from HBM once for all of them (FlashMLA's idea;
// mma.sync m16n8k16 bf16 -> f32 here, not wgmma).
//
// One block (8 warps) a (64-head group, decode row, key split). The block's
// queries [64, 576] sit in shared memory; tiles of 32 latent rows [32, 576]
// stream in by cp.async through a ring of kStages buffers, two tiles ahead
// (gathered row by row through the block table; one block an SM, so the ring
// is what keeps HBM requests in flight: ~72 KB an SM). Per tile:
//   S = Q K^T [64, 32]: warp w takes heads 16 (w % 4) and keys 16 (w / 4);
//   the softmax runs over shared memory, four threads a head, keeping each
//   head's running max and sum there and writing P (bf16) and the
//   rescale factor;
//   O += P V [64, 512] with V the tile's first 512 columns: warp w owns heads
//   16 (w % 4) and dims 256 (w / 4), 128 f32 accumulators a thread.
// The split's unnormalised O and its (max, sum) go to the partials that
// mla_decode.cu's combine merges, in the simple kernel's format.
#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mla_common.cuh"
#include "sluice/backend/cuda/kernels/mla_kernels.h"
#include "sluice/backend/cuda/kernels/latent_decode_tile.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;  // eight warps
constexpr int kHeads = 64;     // heads a block (M)
constexpr int kBlockN = 32;    // latent rows a tile
constexpr int kStages = 3;     // tiles in the ring: the one computed on and two in flight
constexpr int kRank = 512, kRope = 64, kWidth = kRank + kRope;
constexpr int kStride = kWidth + 8;       // padded smem row (elements): ldmatrix conflict-free
constexpr int kScoreStride = kBlockN + 4;  // f32
constexpr int kPStride = kBlockN + 8;      // bf16
constexpr int kChunks = kWidth / 8;        // 16-byte chunks a row
constexpr int kDimsPerWarp = kRank / 2;    // O columns a warp owns
constexpr int kNTilesO = kDimsPerWarp / 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr int kQBytes = kHeads * kStride * 2;
constexpr int kTileBytes = kBlockN * kStride * 2;
constexpr int kScoreBytes = kHeads * kScoreStride * 4;
constexpr int kPBytes = kHeads * kPStride * 2;
constexpr int kSmemBytes = kQBytes + kStages * kTileBytes + kScoreBytes + kPBytes + 3 * kHeads * 4;
static_assert(kQBytes % 16 == 0 && kTileBytes % 16 == 0 && kScoreBytes % 16 == 0 && kPBytes % 16 == 0);

__global__ void __launch_bounds__(kThreads, 1) decode_mma_kernel(StepDeviceView step, MlaDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  auto* s_tiles = reinterpret_cast<__nv_bfloat16*>(smem_raw + kQBytes);  // [kStages][kBlockN][kStride]
  unsigned char* after_tiles = smem_raw + kQBytes + kStages * kTileBytes;
  auto* s_scores = reinterpret_cast<float*>(after_tiles);
  auto* s_p = reinterpret_cast<__nv_bfloat16*>(after_tiles + kScoreBytes);
  auto* s_max = reinterpret_cast<float*>(after_tiles + kScoreBytes + kPBytes);
  float* s_sum = s_max + kHeads;
  float* s_correction = s_sum + kHeads;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int head_block = blockIdx.x, i = blockIdx.y, split = blockIdx.z;
  const int first_head = head_block * kHeads;
  const MlaDecodeBlock block = mla_decode_block(step, a, i, split, first_head, kBlockN);
  const auto* cache = static_cast<const __nv_bfloat16*>(a.cache.data);
  const int block_size = a.cache.block_size;

  // Queries of heads past num_heads are zeros: finite scores, never written.
  for (int c = tid; c < kHeads * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = first_head + r < a.num_heads;
    cp_async_16(s_q + r * kStride + col, block.q + (valid ? static_cast<std::int64_t>(r) * kWidth + col : 0), valid);
  }
  auto load_tile = [&](int tile, int buf) {
    __nv_bfloat16* dst = s_tiles + buf * kBlockN * kStride;
    for (int c = tid; c < kBlockN * kChunks; c += kThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const int key = block.range.begin + tile * kBlockN + r;
      const bool valid = key < block.range.end;
      std::int64_t offset = 0;
      if (valid)
        offset =
            (static_cast<std::int64_t>(block.table[key / block_size]) * block_size + key % block_size) * kWidth + col;
      cp_async_16(dst + r * kStride + col, cache + offset, valid);
    }
  };
  // Commit groups: {Q, tile 0}, {tile 1}, then one a loop iteration (empty
  // past the last tile), so "all but the newest group" is always the tile
  // about to be used.
  const int num_tiles = (block.range.end - block.range.begin + kBlockN - 1) / kBlockN;
  if (num_tiles > 0) load_tile(0, 0);
  cp_async_commit();
  if (num_tiles > 1) load_tile(1, 1);
  cp_async_commit();
  if (tid < kHeads) {
    s_max[tid] = -INFINITY;
    s_sum[tid] = 0.0f;
  }

  const int s_rows = 16 * (warp % 4), s_keys = 16 * (warp / 4);  // this warp's S block
  const int o_rows = 16 * (warp % 4), o_dims = kDimsPerWarp * (warp / 4);  // and O block
  const float scale_log2 = a.scale * kLog2e;
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

    // S block [16 heads, 16 keys] over all 576 dims.
    warp_score_block<kWidth, kStride, kScoreStride>(s_q, kt, s_rows, s_keys, lane, s_scores);
    __syncthreads();

    // Online softmax: four threads a head, eight keys each.
    {
      const int row = tid / 4, part = tid % 4;
      const int tile_key0 = block.range.begin + tile * kBlockN;
      const float old_max = s_max[row];
      float x[8];
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int key = part * 8 + j;
        x[j] = tile_key0 + key < block.range.end ? s_scores[row * kScoreStride + key] * scale_log2 : -INFINITY;
        tile_max = fmaxf(tile_max, x[j]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(old_max, tile_max);  // finite: every tile holds a key of the range
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p = exp2f(x[j] - new_max);
        const __nv_bfloat16 p_bf16 = __float2bfloat16(p);
        s_p[row * kPStride + part * 8 + j] = p_bf16;
        sum += __bfloat162float(p_bf16);  // the sum of what P V adds up
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      __syncwarp();
      if (part == 0) {
        const float correction = exp2f(old_max - new_max);  // 0 at the first tile (old_max -inf)
        s_max[row] = new_max;
        s_sum[row] = s_sum[row] * correction + sum;
        s_correction[row] = correction;
      }
    }
    __syncthreads();

    // O block [16 heads, 256 dims] += P [16, 32] V [32, 256].
    rescale_output_block(o_acc, s_correction, o_rows, lane);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      std::uint32_t p_frag[4];
      ldmatrix_x4(p_frag, s_p + (o_rows + (lane % 16)) * kPStride + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int n = 0; n < kNTilesO; n += 2) {
        std::uint32_t b[4];
        ldmatrix_x4_trans(b, kt + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride + o_dims + n * 8 +
                                 (lane / 16) * 8);
        mma_16816(o_acc[n], p_frag, b[0], b[1]);
        mma_16816(o_acc[n + 1], p_frag, b[2], b[3]);
      }
    }
  }
  cp_async_wait_all();  // the trailing empty groups (and an empty split's queries)
  __syncthreads();

  // Partials in the simple kernel's format: unnormalised O, (max, sum) with
  // the max in natural-log units (the combine uses exp).
  const std::int64_t part_base = static_cast<std::int64_t>(i) * a.num_heads;
  if (tid < kHeads && first_head + tid < a.num_heads) {
    const std::int64_t part = (part_base + first_head + tid) * a.num_splits + split;
    const float m = s_max[tid];
    a.partial_stats[2 * part] = m == -INFINITY ? -INFINITY : m * kLn2;
    a.partial_stats[2 * part + 1] = s_sum[tid];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = first_head + o_rows + lane / 4 + h * 8;
    if (head >= a.num_heads) continue;
    float* dst = a.partial_out + ((part_base + head) * a.num_splits + split) * kRank + o_dims;
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n) {
      const int col = n * 8 + (lane % 4) * 2;
      *reinterpret_cast<float2*>(dst + col) = make_float2(o_acc[n][2 * h], o_acc[n][2 * h + 1]);
    }
  }
}

}  // namespace

void launch_mla_decode_attention_mma(const StepDeviceView& step, const MlaDecodeArgs& args, const Launch& launch) {
  SLUICE_CHECK(args.kv_lora_rank == kRank && args.cache.width == kWidth);
  static bool attribute_set = false;  // once per process: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(decode_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    attribute_set = true;
  }
  const dim3 grid((args.num_heads + kHeads - 1) / kHeads, args.num_decode, args.num_splits);
  launch_kernel(decode_mma_kernel, grid, dim3(kThreads), kSmemBytes, launch, step, args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
