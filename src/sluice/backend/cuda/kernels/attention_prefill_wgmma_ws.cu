// Causal paged attention for prefill chunks on Hopper warpgroup MMA, warp
// specialised (FlashAttention-3's structure; sm_90a, head_dim 128, bf16 with
// f32 accumulation). CudaOptions::prefill_attention = wgmma_ws selects it
// (attention_prefill.cu dispatches); other head_dims stay on mma.sync.
//
// The blocks are those of the other prefill kernels: one per (query head, tile
// of 128 query rows of one sequence), or per split piece (kSplit: f32 partials
// and log2-sum-exp for attention_prefill.cu's merge kernel). Three warpgroups:
//   producer     gathers Q, then every 128-key K/V tile of the block's keys
//                through the block table with cp.async, into a ring of
//                kStages stages. K and V of a stage each have a `full`
//                mbarrier (each producer thread waits for its own copies,
//                fences them for the async proxy and arrives) and an `empty`
//                one (both consumers arrive): K(j) is released as soon as
//                S(j) is done, V(j) after P(j) V(j), so K loads a tile earlier.
//                setmaxnreg gives the producer 32 registers (24 spilled) and
//                each consumer 232.
//   consumers    64 query rows each (wgmma's M). Per key tile j:
//                  issue S(j) = Q K(j)^T, rescale O, issue O += P(j-1) V(j-1);
//                  wait for S(j), release K(j); mask and online softmax of
//                  S(j) while P(j-1) V(j-1) runs; wait for it, release
//                  V(j-1); P(j) to A fragments.
//                The two consumers take turns to issue (named barriers
//                kTurnBarrier + consumer): one's MMAs run under the other's
//                softmax instead of both softmaxes leaving the tensor cores idle.
// Keys past the block's last key are zero-filled, never read from unwritten
// pages. The register arrays are indexed with compile-time constants only.
#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mbarrier.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/wgmma_prefill.cuh"
#include "sluice/backend/prefill_split_plan.h"

namespace sluice::cuda {
namespace {

using namespace wgmma_prefill;

constexpr int kConsumers = 2;
constexpr int kGroupThreads = 128;
constexpr int kThreads = kGroupThreads * (1 + kConsumers);
constexpr int kBlockM = kGroupRows * kConsumers;
static_assert(kBlockM == kPrefillTileRows, "host tiling must match the kernel");
static_assert(kPrefillSplitKeyAlign % kBlockN == 0, "split pieces must start on a key tile");

constexpr int kQBytes = kBlockM * kD * 2;
constexpr int kStageBytes = 2 * kKvTileBytes;  // K then V
constexpr int kStages = 3;                     // K/V ring depth
constexpr int kBarrierBytes = 4 * kStages * 8;  // full and empty, of K and of V, a stage
constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + kBarrierBytes + 1024;  // + alignment slack
static_assert(kSmemBytes <= 227 * 1024, "one block an SM");

// setmaxnreg: __launch_bounds__(kThreads, 1) caps every thread at 168 registers
// (64K / 384, rounded down to 8); the block's 64,512 are redistributed.
constexpr int kProducerRegisters = 32;
constexpr int kConsumerRegisters = 232;
static_assert(kProducerRegisters * kGroupThreads + kConsumerRegisters * kGroupThreads * kConsumers <=
                  (65536 / kThreads) / 8 * 8 * kThreads,
              "the registers redistributed must fit the block's allocation");
// Named barriers (0 is __syncthreads): consumer c issues its MMAs after
// bar.sync(kTurnBarrier + c), which the other consumer's bar.arrive completes.
constexpr int kTurnBarrier = 1;

template <bool kSplit>
__global__ void __launch_bounds__(kThreads, 1) prefill_wgmma_ws_kernel(StepDeviceView step, Params p) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ unsigned char smem_raw[];
  const auto [smem_base, smem] = align_smem_1024(smem_raw);
  const std::uint32_t s_q = smem_base;
  const std::uint32_t s_kv = smem_base + kQBytes;  // [kStages][K tile, V tile]
  const std::uint32_t s_barriers = s_kv + kStages * kStageBytes;
  // Barrier b (kFull / kEmpty + kK / kV) of tile i's stage.
  constexpr int kFull = 0, kEmpty = 2, kK = 0, kV = 1;
  auto barrier = [&](int b, int i) { return s_barriers + 8 * (b * kStages + i % kStages); };

  const int tid = threadIdx.x;
  // Through a shuffle so the compiler knows it is uniform across the warp
  // (branches on it then do not serialize the asynchronous MMAs).
  const int warpgroup = __shfl_sync(0xffffffffu, tid / kGroupThreads, 0);
  const int group_tid = tid % kGroupThreads;
  const int head = blockIdx.x;
  const BlockWork w = block_work<kSplit>(step, blockIdx.y);
  const int first_tile = w.first_tile, num_tiles = w.num_tiles, num_q = w.num_q;
  const int block_tiles = num_tiles - first_tile;  // >= 1: every row sees the first key

  if (tid == 0) {
    for (int stage = 0; stage < kStages; ++stage) {
      for (int kv : {kK, kV}) {
        mbarrier_init(barrier(kFull + kv, stage), kGroupThreads);
        mbarrier_init(barrier(kEmpty + kv, stage), kGroupThreads * kConsumers);
      }
    }
  }
  __syncthreads();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    const int kv_head = head / (p.num_q_heads / p.num_kv_heads);
    const std::int32_t* table = step.block_tables + step.seq_block_offset[w.seq];
    const std::int64_t key_stride = static_cast<std::int64_t>(p.num_kv_heads) * kD;
    const int block_size = p.block_size;
    load_q_tile(smem, p, w, head, group_tid, kGroupThreads);
    // Thread (key group g, chunk c) copies 16-byte chunk c of keys 16g .. 16g + 15
    // of each tile, walking the block table a page at a time (one division a
    // tile, not one a key: the producer shares the SM's issue slots with the
    // consumers). A warp's copy instruction reads two 256-byte key rows.
    constexpr int kKeysPerThread = kBlockN * kChunksPerRow / kGroupThreads;
    const int my_chunk = group_tid % kChunksPerRow;
    const int my_first_row = group_tid / kChunksPerRow * kKeysPerThread;
    const std::int64_t head_offset = static_cast<std::int64_t>(kv_head) * kD + my_chunk * 8;
    // K and V of a tile are two commit groups with barriers of their own: the
    // consumers release K(i) when S(i) is done, a tile before V(i), so the
    // next K loads a tile earlier. Three groups stay in flight (96 KB): after
    // issuing one, each thread waits for its own copies of the group two
    // before (wait_group 2), fences them for the async proxy and arrives on
    // that group's `full` barrier.
    auto gather = [&](unsigned char* dst_tile, const __nv_bfloat16* cache, int i) {
      const int first_key = (first_tile + i) * kBlockN + my_first_row;
      int page = first_key / block_size;
      int in_page = first_key - page * block_size;
      // Offsets of keys past kv_end stay unused: their copies zero-fill.
      std::int64_t offset =
          first_key < w.kv_end
              ? (static_cast<std::int64_t>(table[page]) * block_size + in_page) * key_stride + head_offset
              : 0;
#pragma unroll 4
      for (int j = 0; j < kKeysPerThread; ++j) {
        const bool valid = first_key + j < w.kv_end;
        cp_async_16(dst_tile + swizzled_offset(my_first_row + j, my_chunk, kBlockN), cache + (valid ? offset : 0),
                    valid);
        offset += key_stride;
        if (++in_page == block_size) {
          in_page = 0;
          ++page;
          if (first_key + j + 1 < w.kv_end)
            offset = static_cast<std::int64_t>(table[page]) * block_size * key_stride + head_offset;
        }
      }
      cp_async_commit();
    };
    auto landed = [&](int b, int i) {
      fence_proxy_async();
      mbarrier_arrive(barrier(kFull + b, i));
    };
    for (int i = 0; i < block_tiles; ++i) {
      unsigned char* dk = smem + kQBytes + (i % kStages) * kStageBytes;
      // A stage's previous tile (i - kStages) released by both consumers.
      if (i >= kStages) mbarrier_wait(barrier(kEmpty + kK, i), (i / kStages - 1) & 1);
      gather(dk, p.k_cache, i);  // with Q in the first group
      if (i > 0) {
        cp_async_wait<2>();
        landed(kK, i - 1);
      }
      if (i >= kStages) mbarrier_wait(barrier(kEmpty + kV, i), (i / kStages - 1) & 1);
      gather(dk + kKvTileBytes, p.v_cache, i);
      if (i > 0) {
        cp_async_wait<2>();
        landed(kV, i - 1);
      }
    }
    cp_async_wait<1>();
    landed(kK, block_tiles - 1);
    cp_async_wait<0>();
    landed(kV, block_tiles - 1);
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  const int consumer = warpgroup - 1;
  const int warp_in_group = group_tid / 32;
  const int lane = tid % 32;
  // This thread's rows (accumulator layout: per warp 16 rows, lane / 4 and + 8).
  const int group_row = consumer * kGroupRows;
  const int group_first_pos = w.first_pos + group_row;
  const int pos0 = group_first_pos + warp_in_group * 16 + lane / 4;
  // Tiles [first_tile, group_end) this consumer multiplies: causal, its last
  // row sees keys up to group_first_pos + 63; a consumer of padding rows only
  // (short chunk) none. The consumer of the block's last row multiplies every
  // tile, so every tile loaded has a reader; the other one at most one fewer.
  const int group_end = group_row >= num_q ? first_tile : min(num_tiles, (group_first_pos + 63) / kBlockN + 1);
  float o_acc[2][32];  // [dim panel][n8 block * 4 + i]
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 32; ++i) o_acc[h][i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  float corr[2] = {1.0f, 1.0f};  // O's factor before the next P V
  float s[64];                   // S, then P in f32
  std::uint32_t pa[kBlockN / 16][4];  // P of the previous tile as wgmma A fragments
  auto stage_addr = [&](int i) { return s_kv + (i % kStages) * kStageBytes; };
  constexpr int kTurnThreads = kGroupThreads * kConsumers;
  const int my_turn = kTurnBarrier + consumer, other_turn = kTurnBarrier + 1 - consumer;

  // Both consumers pass through every tile's turn (a tile past group_end only
  // hands the turn on and releases its stage), so the turns alternate
  // strictly and neither runs more than one tile ahead of the other. The
  // first tile and the last P V are peeled off the loop so that every wgmma
  // wait is unconditional: ptxas then sees no accumulator still in flight
  // where the softmax or the rescale reads it (else it serialises the MMAs).
  // Consumer 0 goes first; consumer 1 hands on no turn after the block's last
  // tile, so every arrival on a turn barrier meets a sync.
  if (consumer == 1) named_barrier_arrive(kTurnBarrier, kTurnThreads);
  auto pass_turn = [&](int i) {
    if (consumer == 0 || i + 1 < block_tiles) named_barrier_arrive(other_turn, kTurnThreads);
  };
  const int active = max(group_end - first_tile, 0);  // a prefix of the block's tiles
  if (active > 0) {
    mbarrier_wait(barrier(kFull + kK, 0), 0);
    named_barrier_sync(my_turn, kTurnThreads);
    wgmma_fence();
    issue_scores(s, s_q, kBlockM, group_row, stage_addr(0));
    pass_turn(0);
    wgmma_wait<0>();
    fence_registers(s);
    mbarrier_arrive(barrier(kEmpty + kK, 0));
    online_softmax(s, first_tile * kBlockN, group_first_pos, pos0, lane, p.scale_log2, m_run, l_run, corr);
    to_a_fragments(s, pa);
  }
  for (int i = 1; i < active; ++i) {
    mbarrier_wait(barrier(kFull + kK, i), (i / kStages) & 1);
    mbarrier_wait(barrier(kFull + kV, i - 1), ((i - 1) / kStages) & 1);
    named_barrier_sync(my_turn, kTurnThreads);
    wgmma_fence();
    issue_scores(s, s_q, kBlockM, group_row, stage_addr(i));
    rescale_o(o_acc, corr);
    fence_registers(o_acc[0]);
    fence_registers(o_acc[1]);
    wgmma_fence();
    issue_pv(o_acc, pa, stage_addr(i - 1) + kKvTileBytes);
    pass_turn(i);
    wgmma_wait<1>();
    fence_registers(s);
    mbarrier_arrive(barrier(kEmpty + kK, i));
    online_softmax(s, (first_tile + i) * kBlockN, group_first_pos, pos0, lane, p.scale_log2, m_run, l_run, corr);
    wgmma_wait<0>();
    fence_registers(o_acc[0]);
    fence_registers(o_acc[1]);
    fence_registers(s);  // P(i) replaces P(i - 1) only now that its MMAs are done
    mbarrier_arrive(barrier(kEmpty + kV, i - 1));
    to_a_fragments(s, pa);
  }
  // A tile this consumer skips is released only once it has landed: an
  // earlier arrival could complete the stage's previous phase (tile
  // i - kStages) while the other consumer still reads it.
  for (int i = active; i < block_tiles; ++i) {
    named_barrier_sync(my_turn, kTurnThreads);
    pass_turn(i);
    for (int kv : {kK, kV}) {
      mbarrier_wait(barrier(kFull + kv, i), (i / kStages) & 1);
      mbarrier_arrive(barrier(kEmpty + kv, i));
    }
  }
  if (active > 0) {
    mbarrier_wait(barrier(kFull + kV, active - 1), ((active - 1) / kStages) & 1);
    rescale_o(o_acc, corr);
    fence_registers(o_acc[0]);
    fence_registers(o_acc[1]);
    wgmma_fence();
    issue_pv(o_acc, pa, stage_addr(active - 1) + kKvTileBytes);
    wgmma_wait<0>();
    fence_registers(o_acc[0]);
    fence_registers(o_acc[1]);
    mbarrier_arrive(barrier(kEmpty + kV, active - 1));
  }
  store_rows<kSplit>(p, o_acc, l_run, m_run, group_row + warp_in_group * 16, num_q, w.row_base, head, blockIdx.y,
                     lane);
}

}  // namespace

bool prefill_wgmma_supports(std::int32_t head_dim) { return head_dim == kD; }

void launch_attention_prefill_wgmma_ws(const StepDeviceView& step, const AttentionArgs& args,
                                       const Launch& launch) {
  SLUICE_CHECK_MSG(prefill_wgmma_supports(args.head_dim), "wgmma_ws prefill attention: head_dim must be 128");
  if (step.num_prefill_tiles == 0) return;
  launch_blocks<prefill_wgmma_ws_kernel<false>, false>(kThreads, kSmemBytes, step, args, launch);
}

void launch_attention_prefill_wgmma_ws_split(const StepDeviceView& step, const AttentionArgs& args,
                                             const Launch& launch) {
  SLUICE_CHECK_MSG(prefill_wgmma_supports(args.head_dim), "wgmma_ws prefill attention: head_dim must be 128");
  if (step.num_prefill_split_pieces == 0) return;
  launch_blocks<prefill_wgmma_ws_kernel<true>, true>(kThreads, kSmemBytes, step, args, launch);
}

}  // namespace sluice::cuda
