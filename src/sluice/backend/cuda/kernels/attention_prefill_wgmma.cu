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
// gave non-finite outputs from the third key tile on; cause not found (a
// suspect: this ring's stage reuse assumes no MMA in flight across the
// per-tile barrier). attention_prefill_wgmma_ws.cu overlaps that way, its
// stages released by mbarriers only after the MMAs reading them are done.
#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/wgmma_prefill.cuh"
#include "sluice/backend/prefill_split_plan.h"

namespace sluice::cuda {
namespace {

using namespace wgmma_prefill;

constexpr int kWarpgroups = 2;            // 64 query rows each
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kBlockM = kGroupRows * kWarpgroups;
static_assert(kBlockM == kPrefillTileRows, "host tiling must match the kernel");
static_assert(kPrefillSplitKeyAlign % kBlockN == 0, "split pieces must start on a key tile");

constexpr int kQBytes = kBlockM * kD * 2;
constexpr int kStageBytes = 2 * kKvTileBytes;  // K then V
constexpr int kStages = 3;  // K/V ring depth
constexpr int kLookahead = kStages - 1;  // tiles loading while one is multiplied
constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + 1024;  // + alignment slack

template <bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_wgmma_kernel(StepDeviceView step, Params p) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ unsigned char smem_raw[];
  const auto [smem_base, smem] = align_smem_1024(smem_raw);
  const std::uint32_t s_q = smem_base;
  const std::uint32_t s_kv = smem_base + kQBytes;  // [kStages][K tile, V tile]

  const int tid = threadIdx.x;
  // Through a shuffle so the compiler knows it is uniform across the warp
  // (branches on it then do not serialize the asynchronous MMAs).
  const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp_in_group = (tid % 128) / 32;
  const int lane = tid % 32;
  const int head = blockIdx.x;
  const BlockWork w = block_work<kSplit>(step, blockIdx.y);
  const int num_q = w.num_q, first_pos = w.first_pos, kv_end = w.kv_end, first_tile = w.first_tile;
  const int seq = w.seq, row_base = w.row_base;
  const int kv_head = head / (p.num_q_heads / p.num_kv_heads);
  const std::int32_t* table = step.block_tables + step.seq_block_offset[seq];
  const std::int64_t key_stride = static_cast<std::int64_t>(p.num_kv_heads) * kD;

  load_q_tile(smem, p, w, head, tid, kThreads);
  // Each thread copies one 16-byte chunk column of every 16th key.
  constexpr int kKeysPerPass = kThreads / kChunksPerRow;
  const int my_chunk = tid % kChunksPerRow;
  const int num_tiles = w.num_tiles;
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
    issue_scores(s, s_q, kBlockM, group_row, stage_k(tile));
    wgmma_wait<0>();
    fence_registers(s);
    float correction[2];
    online_softmax(s, tile * kBlockN, group_first_pos, pos0, lane, p.scale_log2, m_run, l_run, correction);
    to_a_fragments(s, pa);
    rescale_o(o_acc, correction);
    fence_registers(o_acc[0]);
    fence_registers(o_acc[1]);
    wgmma_fence();
    issue_pv(o_acc, pa, stage_k(tile) + kKvTileBytes);
    wgmma_wait<0>();
    fence_registers(o_acc[0]);
    fence_registers(o_acc[1]);
  }
  cp_async_wait<0>();
  store_rows<kSplit>(p, o_acc, l_run, m_run, group_row + warp_in_group * 16, num_q, row_base, head, blockIdx.y, lane);
}

}  // namespace

bool prefill_wgmma_supports(std::int32_t head_dim) { return head_dim == kD; }

void launch_attention_prefill_wgmma(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch) {
  SLUICE_CHECK_MSG(prefill_wgmma_supports(args.head_dim), "wgmma prefill attention: head_dim must be 128");
  if (step.num_prefill_tiles == 0) return;
  launch_blocks<prefill_wgmma_kernel<false>, false>(kThreads, kSmemBytes, step, args, launch);
}

void launch_attention_prefill_wgmma_split(const StepDeviceView& step, const AttentionArgs& args,
                                          const Launch& launch) {
  SLUICE_CHECK_MSG(prefill_wgmma_supports(args.head_dim), "wgmma prefill attention: head_dim must be 128");
  if (step.num_prefill_split_pieces == 0) return;
  launch_blocks<prefill_wgmma_kernel<true>, true>(kThreads, kSmemBytes, step, args, launch);
}

}  // namespace sluice::cuda
