// Causal paged attention for prefill chunks on Hopper warpgroup MMA
// (wgmma.mma_async, sm_90a), head_dim 128, bf16 with f32 accumulation.
// CudaOptions::prefill_attention = wgmma selects it (attention_prefill.cu
// dispatches); other head_dims stay on the mma.sync kernel.
//
// One block per (query head, tile of 128 query rows of one sequence), as the
// mma.sync kernel: the host's tile list is shared. Split pieces (kSplit: a
// tile's keys cut in pieces on 128-key bounds, backend/prefill_split_plan.h)
// run the same loop over their keys and write f32 partials and the
// log2-sum-exp for attention_prefill.cu's merge kernel. Two warpgroups own 64 rows
// each (wgmma's M). Per key tile of 128 keys:
//   S = Q K^T    wgmma m64n128k16 x 8, Q and K both from shared memory;
//   softmax      online, in registers, exp2 with the scale folded in;
//   O += P V     wgmma m64n64k16 x 8 x 2, P from registers (the S
//                accumulator's layout is wgmma's A-fragment layout), V from
//                shared memory as an MN-major B operand.
// Q, K and V tiles sit in shared memory in the 128-byte swizzle wgmma reads
// (see swizzled_offset). K/V pages are gathered key by key with cp.async into
// a ring of kStages tiles, two tiles ahead of the one multiplied. Each
// warpgroup waits for its own MMAs; the other warpgroup's MMAs fill the tensor
// cores while it runs its softmax. Keys past the last query are zero-filled,
// never read from unwritten pages.
//
// Tried and dropped (session 3): FlashAttention-3's intra-warpgroup overlap
// (S of tile j + 1 issued before P V of tile j, the softmax running under it)
// gave non-finite outputs from the third key tile on; cause not found.
#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"
#include "sluice/backend/prefill_split_plan.h"

namespace sluice::cuda {
namespace {

constexpr int kD = 128;                   // head_dim
constexpr int kWarpgroups = 2;            // 64 query rows each
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kBlockM = 64 * kWarpgroups;
constexpr int kBlockN = 128;              // keys per tile
static_assert(kBlockM == kPrefillTileRows, "host tiling must match the kernel");
static_assert(kPrefillSplitKeyAlign % kBlockN == 0, "split pieces must start on a key tile");
constexpr float kLog2e = 1.4426950408889634f;

// Q, K and V tiles of [rows][128] bf16 are two swizzled panels of [rows][64]
// (wgmma.cuh).
constexpr int kPanelCols = kWgmmaPanelCols;
constexpr int kLineBytes = kWgmmaLineBytes;
constexpr int kQBytes = kBlockM * kD * 2;
constexpr int kKvTileBytes = kBlockN * kD * 2;
constexpr int kStageBytes = 2 * kKvTileBytes;  // K then V
constexpr int kStages = 3;  // K/V ring depth
constexpr int kLookahead = kStages - 1;  // tiles loading while one is multiplied
constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + 1024;  // + alignment slack

struct WgmmaPrefillParams {
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  float* partial_out;  // split pieces: [piece, head, kPrefillTileRows, kD]
  float* partial_lse;  // split pieces: [piece, head, kPrefillTileRows], log2 domain
  const __nv_bfloat16* k_cache;
  const __nv_bfloat16* v_cache;
  int num_q_heads, num_kv_heads, block_size;
  float scale_log2;
};

template <bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_wgmma_kernel(StepDeviceView step, WgmmaPrefillParams p) {
  pdl_launch_dependents();
  pdl_wait();
  constexpr int kChunksPerRow = kD / 8;  // 16-byte chunks
  extern __shared__ unsigned char smem_raw[];
  // Swizzled panels need 1024-byte alignment; the dynamic window only promises 16.
  const std::uint32_t smem_base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (smem_base - smem_addr(smem_raw));
  const std::uint32_t s_q = smem_base;
  const std::uint32_t s_kv = smem_base + kQBytes;  // [kStages][K tile, V tile]

  const int tid = threadIdx.x;
  // Through a shuffle so the compiler knows it is uniform across the warp
  // (branches on it then do not serialize the asynchronous MMAs).
  const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp_in_group = (tid % 128) / 32;
  const int lane = tid % 32;
  const int head = blockIdx.x;
  const std::int32_t* item =
      kSplit ? step.prefill_split_pieces + 4 * blockIdx.y : step.prefill_tiles + 2 * blockIdx.y;
  const int seq = item[0];
  const int tile_row = item[1];
  const int seq_rows = step.seq_num_rows[seq];
  const int row_base = step.seq_row_begin[seq] + tile_row;
  const int num_q = min(kBlockM, seq_rows - tile_row);
  const int first_pos = step.seq_num_computed[seq] + tile_row;
  // Keys [key_begin, kv_end): a piece's inner bounds are multiples of kBlockN,
  // at or below first_pos, so only the causal end is ever a partial tile.
  const int key_begin = kSplit ? item[2] : 0;
  const int kv_end = kSplit ? min(item[3], first_pos + num_q) : first_pos + num_q;
  const int first_tile = key_begin / kBlockN;
  const int kv_head = head / (p.num_q_heads / p.num_kv_heads);
  const std::int32_t* table = step.block_tables + step.seq_block_offset[seq];
  const std::int64_t key_stride = static_cast<std::int64_t>(p.num_kv_heads) * kD;

  // Q tile; rows past the chunk are zero-filled.
  for (int c = tid; c < kBlockM * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const bool valid = r < num_q;
    const __nv_bfloat16* src =
        p.q + (static_cast<std::int64_t>(valid ? row_base + r : row_base) * p.num_q_heads + head) * kD +
        chunk * 8;
    cp_async_16(smem + swizzled_offset(r, chunk, kBlockM), src, valid);
  }
  // Each thread copies one 16-byte chunk column of every 16th key.
  constexpr int kKeysPerPass = kThreads / kChunksPerRow;
  const int my_chunk = tid % kChunksPerRow;
  const int num_tiles = (kv_end + kBlockN - 1) / kBlockN;
  auto load_kv = [&](int tile) {
    if (tile >= num_tiles) return;
    unsigned char* dk = smem + kQBytes + (tile % kStages) * kStageBytes;
    unsigned char* dv = dk + kKvTileBytes;
#pragma unroll
    for (int i = 0; i < kBlockN / kKeysPerPass; ++i) {
      const int r = i * kKeysPerPass + tid / kChunksPerRow;
      const int key = tile * kBlockN + r;
      const bool valid = key < kv_end;
      std::int64_t off = 0;
      if (valid) {
        const std::int64_t slot =
            static_cast<std::int64_t>(table[key / p.block_size]) * p.block_size + key % p.block_size;
        off = slot * key_stride + kv_head * kD + my_chunk * 8;
      }
      const std::uint32_t dst = swizzled_offset(r, my_chunk, kBlockN);
      cp_async_16(dk + dst, p.k_cache + off, valid);
      cp_async_16(dv + dst, p.v_cache + off, valid);
    }
  };
  // One commit group per tile (the first carries Q too), empty past the end.
#pragma unroll
  for (int t = 0; t < kLookahead; ++t) {
    load_kv(first_tile + t);
    cp_async_commit();
  }

  // This thread's rows (accumulator layout: per warp 16 rows, lane / 4 and + 8).
  const int group_row = warpgroup * 64;
  const int group_first_pos = first_pos + group_row;
  const int pos0 = group_first_pos + warp_in_group * 16 + lane / 4;
  // Tiles this warpgroup multiplies: causal, its last row sees keys up to
  // group_first_pos + 63; a warpgroup of padding rows only (short chunk) none.
  const int group_tiles =
      group_row >= num_q ? 0 : min(num_tiles, (group_first_pos + 63) / kBlockN + 1);
  float o_acc[2][32];  // [dim panel][n8 block * 4 + i]
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 32; ++i) o_acc[h][i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  auto stage_k = [&](int tile) { return s_kv + (tile % kStages) * kStageBytes; };
  // S = Q K^T: 8 k-steps of 16 dims; within a 128-byte line a k-step is a
  // 32-byte advance of the start address (the swizzle uses address bits).
  auto issue_scores = [&](float (&s)[64], int tile) {
    const std::uint32_t s_k = stage_k(tile);
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const int panel = ks / 4, within = (ks % 4) * 32;
      const std::uint64_t dq =
          smem_desc(s_q + panel * kBlockM * kLineBytes + group_row * kLineBytes + within, 16, 1024);
      const std::uint64_t dk = smem_desc(s_k + panel * kBlockN * kLineBytes + within, 16, 1024);
      wgmma_m64n128k16_ss(s, dq, dk, ks > 0);
    }
    wgmma_commit();
  };
  // O += P V. V is [key][dim] in the same panels as K: for B = V (keys x
  // dims) that is MN-major. One n64 MMA per panel, so only the stride between
  // 8-key groups (1024 bytes) matters.
  auto issue_pv = [&](const std::uint32_t (&pa)[kBlockN / 16][4], int tile) {
    const std::uint32_t s_v = stage_k(tile) + kKvTileBytes;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
      for (int panel = 0; panel < 2; ++panel) {
        const std::uint64_t dv =
            smem_desc(s_v + panel * kBlockN * kLineBytes + kk * 16 * kLineBytes, 1024, 1024);
        wgmma_m64n64k16_rs_tb(o_acc[panel], pa[kk], dv);
      }
    }
    wgmma_commit();
  };
  // Online softmax of one tile's scores into P (wgmma A fragments, one per 16
  // keys); updates m and returns the factor O and l must be scaled by.
  // s[4j + i]: row pos0 + 8 (i / 2), key key0 + 8j + 2 (lane % 4) + (i % 2).
  auto softmax = [&](float (&s)[64], int tile, std::uint32_t (&pa)[kBlockN / 16][4], float (&row_sum)[2],
                     float (&correction)[2]) {
    const int key0 = tile * kBlockN;
    // Causal mask on the diagonal tiles only (a branch, not per-score selects).
    if (key0 + kBlockN - 1 > group_first_pos) {
      const int first_key = key0 + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (first_key + 8 * j + (i % 2) > pos0 + 8 * (i / 2)) s[4 * j + i] = -INFINITY;
    }
    float row_max[2] = {-INFINITY, -INFINITY};  // unscaled: the scale is folded into the exponent
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) row_max[i / 2] = fmaxf(row_max[i / 2], s[4 * j + i]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 1));
      row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 2));
      const float m_new = fmaxf(m_run[h], row_max[h] * p.scale_log2);
      // m is finite from the first tile on: every row sees its first key there.
      correction[h] = m_new == -INFINITY ? 1.0f : exp2f(m_run[h] - m_new);
      m_run[h] = m_new;
      row_sum[h] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      float pr[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        pr[i] = exp2f(fmaf(s[4 * j + i], p.scale_log2, -m_run[i / 2]));
        row_sum[i / 2] += pr[i];
      }
      pa[j / 2][(j % 2) * 2 + 0] = pack_bf16(pr[0], pr[1]);
      pa[j / 2][(j % 2) * 2 + 1] = pack_bf16(pr[2], pr[3]);
    }
  };
  auto rescale = [&](const float (&row_sum)[2], const float (&correction)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * correction[h] + row_sum[h];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 32; ++i) o_acc[h][i] *= correction[(i % 4) / 2];
  };

  std::uint32_t pa[kBlockN / 16][4];  // P as wgmma A fragments
  for (int tile = first_tile; tile < num_tiles; ++tile) {
    // Tile `tile` has landed once at most kLookahead - 1 later groups are pending.
    cp_async_wait<kLookahead - 1>();
    fence_proxy_async();
    __syncthreads();
    // The stage written now was last read by MMAs every warpgroup waited
    // for before the barrier above.
    load_kv(tile + kLookahead);
    cp_async_commit();
    if (tile >= group_tiles) continue;

    float s[64];
    wgmma_fence();
    issue_scores(s, tile);
    wgmma_wait<0>();
    fence_registers(s);
    float row_sum[2], correction[2];
    softmax(s, tile, pa, row_sum, correction);
    rescale(row_sum, correction);
    fence_registers(o_acc[0]);
    fence_registers(o_acc[1]);
    wgmma_fence();
    issue_pv(pa, tile);
    wgmma_wait<0>();
    fence_registers(o_acc[0]);
    fence_registers(o_acc[1]);
  }
  cp_async_wait<0>();

  // Row sums are partial per lane: finish them across the four lanes of a row.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = group_row + warp_in_group * 16 + lane / 4 + 8 * h;
    if (r >= num_q) continue;
    const float inv = 1.0f / l_run[h];
    if constexpr (kSplit) {
      const std::int64_t slot = (static_cast<std::int64_t>(blockIdx.y) * p.num_q_heads + head) * kBlockM + r;
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

}  // namespace

bool prefill_wgmma_supports(std::int32_t head_dim) { return head_dim == kD; }

namespace {

template <bool kSplit>
void launch_wgmma(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch) {
  WgmmaPrefillParams p{};
  p.q = static_cast<const __nv_bfloat16*>(args.q);
  p.out = static_cast<__nv_bfloat16*>(args.out);
  p.partial_out = static_cast<float*>(args.prefill_split_workspace);
  // The merge kernel's layout (attention_prefill.cu): every piece's outputs, then every lse.
  p.partial_lse = p.partial_out == nullptr
                      ? nullptr
                      : p.partial_out + static_cast<std::int64_t>(step.num_prefill_split_pieces) *
                                            args.num_q_heads * kPrefillTileRows * kD;
  p.k_cache = static_cast<const __nv_bfloat16*>(args.k_cache);
  p.v_cache = static_cast<const __nv_bfloat16*>(args.v_cache);
  p.num_q_heads = args.num_q_heads;
  p.num_kv_heads = args.num_kv_heads;
  p.block_size = args.block_size_tokens;
  p.scale_log2 = args.scale * kLog2e;
  constexpr auto kernel = prefill_wgmma_kernel<kSplit>;
  static bool attribute_set = false;  // once per process: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    attribute_set = true;
  }
  const dim3 grid(args.num_q_heads, kSplit ? step.num_prefill_split_pieces : step.num_prefill_tiles);
  launch_kernel(kernel, grid, dim3(kThreads), kSmemBytes, launch, step, p);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_attention_prefill_wgmma(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch) {
  SLUICE_CHECK_MSG(prefill_wgmma_supports(args.head_dim), "wgmma prefill attention: head_dim must be 128");
  if (step.num_prefill_tiles == 0) return;
  launch_wgmma<false>(step, args, launch);
}

void launch_attention_prefill_wgmma_split(const StepDeviceView& step, const AttentionArgs& args,
                                          const Launch& launch) {
  SLUICE_CHECK_MSG(prefill_wgmma_supports(args.head_dim), "wgmma prefill attention: head_dim must be 128");
  if (step.num_prefill_split_pieces == 0) return;
  launch_wgmma<true>(step, args, launch);
}

}  // namespace sluice::cuda
