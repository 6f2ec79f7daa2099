// MLA decode attention with the keys as wgmma's M (CudaOptions::mla_kernels =
// wgmma_keys_m; latent 512 + rope 64, at most 16 heads a decode row, pages of
// a multiple of 8 rows; sm_90a): one GPU's share of DeepSeek-V3's heads under
// tensor parallel 8. The heads-as-M kernel (mla_decode_wgmma.cu) pads 16
// heads to wgmma's M of 64, so 75% of its MMA rows are padding and it is
// bound by its MMAs' shared-memory reads, not HBM (S26-3: 58-60% of HBM).
// Here the 64 keys of a latent tile are M and the heads are N, as session
// 20's split_mma_keys_kernel does for GQA decode on mma.sync:
//   S^T [64 keys, 16 heads] = K Q^T   36 m64n16k16 over 576 dims: A = the
//       latent tile (K-major), B = Q [16 heads, 576] (K-major);
//   O^T [512 dims, 16 heads] += V^T P^T   8 M tiles of 64 dims x 4 k-steps of
//       16 keys: A = V^T, the tile's first 8 panels read MN-major (transposed
//       A, legal for 16-bit types from shared memory), B = P^T [16 heads,
//       64 keys] bf16 in one swizzled panel (K-major).
// The softmax runs over M: a head's column max over the 8 quad rows of a warp
// by shuffles, over the 4 warps through shared memory and a named barrier.
//
// Block: one (decode row, key split), 160 threads: warpgroup 0 (warps 0-3)
// issues the MMAs and runs the softmax; warp 4's first lane issues the TMA
// boxes (mla_latent_cache_map, latent_box_slots: the wgmma-tma kernel's
// boxes) into a ring of 25 panels of 8 KB (2.8 tiles; Q is only 18 KB, so the
// ring takes what the 64-head kernel spent on Q). Tile t's panel p occupies
// ring slot (9 t + p) % 25, with a full mbarrier (the TMA's bytes) and an
// empty one (an arrival from each consumer warp once its MMAs that read the
// slot are waited for) a slot: the rope panel is freed after S, the 8 value
// panels after P V, so loads run up to 2.8 tiles ahead.
//
// Synchronisation, per tile t (named barriers among the 128 consumers only):
//   S(t) issued panel by panel after each panel's full wait; waited for.
//   column maxima -> s_heads[warp]; bar kMaxBarrier; each thread reads the
//     four warps' maxima of its 4 heads. (A warp writes s_heads for t + 1
//     only after kPReadyBarrier of t, which every warp reaches after reading
//     it for t.)
//   P^T stores (bf16), the last tile's stale value rows zeroed, then
//     fence.proxy.async (generic writes -> wgmma's async-proxy reads) and
//     bar kPReadyBarrier. A warp writes P for t + 1 only after kMaxBarrier of
//     t + 1, which every warp reaches after waiting for its part of P V(t):
//     no warp's P V still reads P when it is overwritten.
//   O rescaled (skipped where no head's max rose), P V(t) issued, then S(t + 1)
//     (its panels' waits overlap P V(t)); wait<1> = P V(t) done -> value
//     panels released; wait<0> = S(t + 1) done -> rope panel released.
// The last tile's step is instantiated without S(t + 1), so no MMA is in
// flight where branches join (ptxas serializes wgmma otherwise).
//
// Output: O^T staged in shared memory as [16 heads][512] f32 (the ring, free
// once every warp's MMAs are done), then written a 16-byte chunk a thread:
// O / l as bf16 to o_latent when one split covers the context, else the
// unnormalised partials and (max, sum) that mla_decode.cu's combine merges.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <numeric>
#include <type_traits>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/latent_wgmma_tile.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mbarrier.cuh"
#include "sluice/backend/cuda/kernels/mla_common.cuh"
#include "sluice/backend/cuda/kernels/mla_kernels.h"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/tma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kConsumerThreads = 128;            // warpgroup 0: MMAs and softmax
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kThreads = kConsumerThreads + 32;  // + warp 4: the TMA producer
constexpr int kProducerWarp = kConsumerWarps;
constexpr int kHeads = kMlaKeysMMaxHeads;        // 16: wgmma's N, zero-padded past the row's heads
constexpr int kBlockN = 64;                      // keys a tile: wgmma's M
constexpr int kRank = 512, kRope = 64, kWidth = kRank + kRope;
constexpr int kPanels = kWidth / kWgmmaPanelCols;  // 9 a tile: S's K dimension
constexpr int kVPanels = kRank / kWgmmaPanelCols;  // 8: V^T's M tiles
constexpr int kRopePanel = kVPanels;               // the panel S reads and P V does not
constexpr int kRingPanels = 25;                    // all that fits beside Q
constexpr int kPanelBytes = kBlockN * kWgmmaLineBytes;
constexpr int kQPanelBytes = kHeads * kWgmmaLineBytes;
constexpr int kQBytes = kPanels * kQPanelBytes;
constexpr int kRingBytes = kRingPanels * kPanelBytes;
constexpr int kPBytes = kHeads * kWgmmaLineBytes;  // P^T [16 heads][64 keys] bf16: one swizzled panel
constexpr int kHeadStatBytes = kConsumerWarps * kHeads * 4;
// 1024: alignment slack; the full and empty mbarriers (one each a ring slot) at the end.
constexpr int kSmemBytes = 1024 + kQBytes + kRingBytes + kPBytes + kHeadStatBytes + 2 * kRingPanels * 8;
static_assert(kSmemBytes <= 227 * 1024, "one block an SM: Hopper's opt-in shared memory");
constexpr int kOStride = kRank + 4;  // f32: the staged O^T's rows, conflict-free column stores
static_assert(kHeads * kOStride * 4 <= kRingBytes, "O^T is staged in the ring");
constexpr int kMaxBoxes = kBlockN / 8;  // boxes a tile at the smallest box, 8 rows
constexpr int kMaxBarrier = 1;          // every warp's column maxima are in s_heads
constexpr int kPReadyBarrier = 2;       // P^T (and the last tile's zeroed rows) are in shared memory
constexpr int kEndBarrier = 3;          // every warp's MMAs are done: the ring may hold O^T
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The accumulator layout of an m64n16 wgmma: d[4j + i] is row (M: key or
// dim) 16 warp + lane / 4 + 8 (i / 2), column (N: head) 8j + 2 (lane % 4) +
// (i % 2). A thread's 4 heads, k = 2j + i % 2:
__device__ __forceinline__ int head_of(int k, int lane) { return 8 * (k / 2) + 2 * (lane % 4) + (k % 2); }

// box_rows: gcd(block size, kBlockN), the height of the TMA boxes of cache_map.
__global__ void __launch_bounds__(kThreads, 1)
    decode_keys_m_kernel(StepDeviceView step, MlaDecodeArgs a, const __grid_constant__ CUtensorMap cache_map,
                         int box_rows) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ unsigned char smem_raw[];
  const auto [smem_base, smem] = align_smem_1024(smem_raw);
  const std::uint32_t s_q = smem_base;                 // [kPanels][kHeads][64], swizzled
  const std::uint32_t s_ring = smem_base + kQBytes;    // [kRingPanels][kBlockN][64], swizzled
  const std::uint32_t s_p = s_ring + kRingBytes;       // [kHeads][kBlockN] bf16, swizzled
  unsigned char* p_bytes = smem + kQBytes + kRingBytes;
  // [warp][head] f32: the warps' column maxima each tile; their sums at the end.
  float* s_heads = reinterpret_cast<float*>(p_bytes + kPBytes);
  const std::uint32_t s_full = s_p + kPBytes + kHeadStatBytes;  // [kRingPanels]: the slot's panel landed
  const std::uint32_t s_empty = s_full + kRingPanels * 8;       // [kRingPanels]: its readers are done

  const int tid = threadIdx.x, lane = tid % 32;
  // Through a shuffle so the compiler knows it is warp-uniform (branches on
  // it then do not serialize the asynchronous MMAs).
  const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);
  const int i = blockIdx.y, split = blockIdx.z;
  const MlaDecodeBlock block = mla_decode_block(step, a, i, split, /*first_head=*/0, kBlockN);
  const int num_tiles = (block.range.end - block.range.begin + kBlockN - 1) / kBlockN;
  if (tid == 0) {
#pragma unroll 1
    for (int b = 0; b < kRingPanels; ++b) {
      mbarrier_init(s_full + 8 * b, 1);
      mbarrier_init(s_empty + 8 * b, kConsumerWarps);
    }
    fence_mbarrier_init_cluster();
  }
  if (tid == kProducerWarp * 32) asm volatile("prefetch.tensormap [%0];\n" ::"l"(&cache_map) : "memory");
  load_latent_queries<kHeads, kWidth, kThreads>(smem, block.q, a.num_heads);
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();  // Q (cp.async, generic proxy) before wgmma reads it
  __syncthreads();      // Q and the barriers' init; the last block-wide barrier

  // Tile t's panel p lives in ring slot (9 t + p) % kRingPanels; its use
  // count, mod 2, is the parity of the slot's barrier phases.
  auto ring_index = [](int tile, int panel) { return tile * kPanels + panel; };

  if (warp == kProducerWarp) {
    if (lane != 0) return;
    const int block_size = a.cache.block_size;
#pragma unroll 1
    for (int tile = 0; tile < num_tiles; ++tile) {
      const int first_key = block.range.begin + tile * kBlockN;
      const int num_boxes = (min(kBlockN, block.range.end - first_key) + box_rows - 1) / box_rows;
      int slot[kMaxBoxes];
      latent_box_slots(block.table, block_size, first_key, box_rows, num_boxes, slot);
#pragma unroll 1
      for (int p = 0; p < kPanels; ++p) {
        const int g = ring_index(tile, p), ring = g % kRingPanels, use = g / kRingPanels;
        const std::uint32_t full = s_full + 8 * ring;
        if (use > 0) mbarrier_wait(s_empty + 8 * ring, (use - 1) & 1);
        mbarrier_expect_tx(full, num_boxes * box_rows * kWgmmaLineBytes);
#pragma unroll
        for (int box = 0; box < kMaxBoxes; ++box)
          if (box < num_boxes)
            tma_load_2d(s_ring + ring * kPanelBytes + box * box_rows * kWgmmaLineBytes, &cache_map,
                        p * kWgmmaPanelCols, slot[box], full);
        mbarrier_arrive(full);
      }
    }
    return;
  }

  // --- warpgroup 0 ---
  auto panel_addr = [&](int tile, int panel) {
    return s_ring + (ring_index(tile, panel) % kRingPanels) * kPanelBytes;
  };
  auto wait_panel = [&](int tile, int panel) {
    const int g = ring_index(tile, panel);
    mbarrier_wait(s_full + 8 * (g % kRingPanels), (g / kRingPanels) & 1);
  };
  // This warp's MMAs that read the panel are waited for (each warp arrives).
  auto release_panel = [&](int tile, int panel) {
    if (lane == 0) mbarrier_arrive(s_empty + 8 * (ring_index(tile, panel) % kRingPanels));
  };

  const float scale_log2 = a.scale * kLog2e;
  float s[8];                // S^T of the tile
  float o[kVPanels][8];      // O^T, M tile mt: dims 64 mt + (the layout's row)
  float m_run[4], l_run[4];  // this thread's 4 heads: running max (log2 units), its keys' share of the sum
#pragma unroll
  for (int mt = 0; mt < kVPanels; ++mt)
#pragma unroll
    for (int k = 0; k < 8; ++k) o[mt][k] = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    m_run[k] = -INFINITY;
    l_run[k] = 0.0f;
  }

  // S^T = K Q^T over 36 k-steps of 16 dims; within a 128-byte line a k-step
  // is a 32-byte advance of the start address (the swizzle uses address bits).
  auto issue_s = [&](int tile) {
#pragma unroll
    for (int ks = 0; ks < kWidth / 16; ++ks) {
      const int panel = ks / 4, within = (ks % 4) * 32;
      if (ks % 4 == 0) wait_panel(tile, panel);
      wgmma_m64n16k16_ss<false>(s, smem_desc(panel_addr(tile, panel) + within, 16, 1024),
                                smem_desc(s_q + panel * kQPanelBytes + within, 16, 1024), ks > 0);
    }
    wgmma_commit();
  };
  // O^T += V^T P^T: V^T's M tile mt is value panel mt read MN-major (64 dims
  // of a 128-byte line; k-step kk = keys [16 kk, 16 kk + 16), 16 lines on);
  // P^T's k-step kk is a 32-byte advance in its one panel.
  auto issue_pv = [&](int tile) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int mt = 0; mt < kVPanels; ++mt)
        wgmma_m64n16k16_ss<true>(o[mt], smem_desc(panel_addr(tile, mt) + kk * 16 * kWgmmaLineBytes, 1024, 1024),
                                 smem_desc(s_p + kk * 32, 16, 1024), true);
    wgmma_commit();
  };

  // The online softmax of tile `tile` from S^T: P^T to shared memory and
  // each head's rescale factor; ends at kPReadyBarrier.
  auto softmax = [&](int tile, float (&correction)[4]) {
    const int valid_keys = block.range.end - (block.range.begin + tile * kBlockN);
    if (valid_keys < kBlockN) {
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (16 * warp + lane / 4 + 8 * ((k % 4) / 2) >= valid_keys) s[k] = -INFINITY;
    }
    float tile_max[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      tile_max[k] = fmaxf(s[4 * (k / 2) + (k % 2)], s[4 * (k / 2) + 2 + (k % 2)]);
#pragma unroll
      for (int offset = 4; offset < 32; offset *= 2)
        tile_max[k] = fmaxf(tile_max[k], __shfl_xor_sync(0xffffffffu, tile_max[k], offset));
    }
    if (lane < 4) {
#pragma unroll
      for (int k = 0; k < 4; ++k) s_heads[warp * kHeads + head_of(k, lane)] = tile_max[k];
    }
    named_barrier_sync(kMaxBarrier, kConsumerThreads);
    // Every tile holds a key of the range: the max is finite from the first on.
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float m = s_heads[head_of(k, lane)];
#pragma unroll
      for (int w = 1; w < kConsumerWarps; ++w) m = fmaxf(m, s_heads[w * kHeads + head_of(k, lane)]);
      const float m_new = fmaxf(m_run[k], m * scale_log2);
      correction[k] = m_new == -INFINITY ? 1.0f : exp2f(m_run[k] - m_new);
      m_run[k] = m_new;
      l_run[k] *= correction[k];
    }
    // P^T[head][key] at line `head` of the P panel, 16-byte chunk key / 8
    // swizzled by head % 8: for each (j, i) a warp's 32 lanes write 16
    // distinct banks (4 heads, 8 consecutive keys: 16 bytes each).
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int h = 2 * (k / 4) + k % 2;  // this thread's head index (j = k / 4, i = k % 4)
      const float p = exp2f(fmaf(s[k], scale_log2, -m_run[h]));
      l_run[h] += p;
      const int head = head_of(h, lane), chunk = 2 * warp + (k % 4) / 2;
      *reinterpret_cast<__nv_bfloat16*>(p_bytes + head * kWgmmaLineBytes + ((chunk ^ (head % 8)) << 4) +
                                        (lane / 4) * 2) = __float2bfloat16(p);
    }
    if (valid_keys < kBlockN) {
      // Rows past the range in the value panels: stale shared memory that P V
      // multiplies by P = 0 (NaN unless finite). S has read them already.
      zero_latent_rows_past<kBlockN, kVPanels>(valid_keys, tid, kConsumerThreads, [&](int p) {
        return smem + kQBytes + (ring_index(tile, p) % kRingPanels) * kPanelBytes;
      });
    }
    fence_proxy_async();
    named_barrier_sync(kPReadyBarrier, kConsumerThreads);
  };

  // One tile: softmax, P V, and (kMore) the next tile's S under P V.
  auto run_tile = [&](int tile, auto more) {
    constexpr bool kMore = decltype(more)::value;
    float correction[4];
    softmax(tile, correction);
    // O's rescale, skipped, exactly, where no head of the warp raised its max.
    if (__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f || correction[2] != 1.0f ||
                                    correction[3] != 1.0f)) {
#pragma unroll
      for (int mt = 0; mt < kVPanels; ++mt)
#pragma unroll
        for (int k = 0; k < 8; ++k) o[mt][k] *= correction[2 * (k / 4) + k % 2];
    }
#pragma unroll
    for (int mt = 0; mt < kVPanels; ++mt) fence_registers(o[mt]);
    wgmma_fence();
    issue_pv(tile);
    if constexpr (kMore) {
      issue_s(tile + 1);
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
#pragma unroll
    for (int mt = 0; mt < kVPanels; ++mt) fence_registers(o[mt]);
#pragma unroll
    for (int p = 0; p < kVPanels; ++p) release_panel(tile, p);
    if constexpr (kMore) {
      wgmma_wait<0>();
      fence_registers(s);
      release_panel(tile + 1, kRopePanel);
    }
  };

  if (num_tiles > 0) {
    wgmma_fence();
    issue_s(0);
    wgmma_wait<0>();
    fence_registers(s);
    release_panel(0, kRopePanel);
  }
#pragma unroll 1
  for (int tile = 0; tile + 1 < num_tiles; ++tile) run_tile(tile, std::true_type{});
  if (num_tiles > 0) run_tile(num_tiles - 1, std::false_type{});

  // --- the split's end ---
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int offset = 4; offset < 32; offset *= 2) l_run[k] += __shfl_xor_sync(0xffffffffu, l_run[k], offset);
  // Every warp's MMAs are waited for (the ring is free: every panel loaded
  // was waited for, so no TMA is in flight) and has read the last maxima.
  named_barrier_sync(kEndBarrier, kConsumerThreads);
  if (lane < 4) {
#pragma unroll
    for (int k = 0; k < 4; ++k) s_heads[warp * kHeads + head_of(k, lane)] = l_run[k];
  }
  float* s_o = reinterpret_cast<float*>(smem + kQBytes);  // [kHeads][kOStride]: O^T transposed back
#pragma unroll
  for (int mt = 0; mt < kVPanels; ++mt)
#pragma unroll
    for (int k = 0; k < 8; ++k)
      s_o[head_of(2 * (k / 4) + k % 2, lane) * kOStride + 64 * mt + 16 * warp + lane / 4 + 8 * ((k % 4) / 2)] =
          o[mt][k];
  named_barrier_sync(kEndBarrier, kConsumerThreads);

  const int heads = min(kHeads, a.num_heads);
  const std::int64_t part_base = static_cast<std::int64_t>(i) * a.num_heads;
  auto head_sum = [&](int head) {
    float l = 0.0f;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) l += s_heads[w * kHeads + head];
    return l;
  };
  if (a.num_splits == 1) {
    // The whole context in one block: O / l straight to o_latent (bf16); every row has a key, so l > 0.
    for (int c = tid; c < heads * (kRank / 8); c += kConsumerThreads) {
      const int head = c / (kRank / 8), d = c % (kRank / 8) * 8;
      const float inv_l = 1.0f / head_sum(head);
      const float* src = s_o + head * kOStride + d;
      const uint4 packed = make_uint4(pack_bf16(src[0] * inv_l, src[1] * inv_l), pack_bf16(src[2] * inv_l, src[3] * inv_l),
                                      pack_bf16(src[4] * inv_l, src[5] * inv_l), pack_bf16(src[6] * inv_l, src[7] * inv_l));
      *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.o_latent) + (part_base + head) * kRank + d) = packed;
    }
    return;
  }
  // The simple kernel's partials: unnormalised O, (max in natural-log units, sum).
  for (int c = tid; c < heads * (kRank / 4); c += kConsumerThreads) {
    const int head = c / (kRank / 4), d = c % (kRank / 4) * 4;
    const std::int64_t part = (part_base + head) * a.num_splits + split;
    *reinterpret_cast<float4*>(a.partial_out + part * kRank + d) =
        *reinterpret_cast<const float4*>(s_o + head * kOStride + d);
  }
  if (warp == 0 && lane < 4) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int head = head_of(k, lane);
      if (head >= heads) continue;
      const std::int64_t part = (part_base + head) * a.num_splits + split;
      a.partial_stats[2 * part] = m_run[k] == -INFINITY ? -INFINITY : m_run[k] * kLn2;
      a.partial_stats[2 * part + 1] = head_sum(head);
    }
  }
}

}  // namespace

bool mla_decode_keys_m_supports(std::int32_t num_heads, std::int32_t block_size) {
  // Boxes of whole 8-row lines of the swizzle that never cross a page or a tile.
  return num_heads >= 1 && num_heads <= kMlaKeysMMaxHeads && block_size % 8 == 0;
}

void launch_mla_decode_attention_keys_m(const StepDeviceView& step, const MlaDecodeArgs& args, const Launch& launch) {
  SLUICE_CHECK(args.kv_lora_rank == kRank && args.cache.width == kWidth && args.cache.num_blocks > 0);
  SLUICE_CHECK_MSG(mla_decode_keys_m_supports(args.num_heads, args.cache.block_size),
                   "MLA keys-as-M decode: at most 16 heads and a block size that is a multiple of 8");
  static bool attribute_set = false;  // once per process: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(
        cudaFuncSetAttribute(decode_keys_m_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    attribute_set = true;
  }
  const int box_rows = std::gcd(args.cache.block_size, kBlockN);
  const dim3 grid(1, args.num_decode, args.num_splits);
  launch_kernel(decode_keys_m_kernel, grid, dim3(kThreads), kSmemBytes, launch, step, args,
                mla_latent_cache_map(args.cache, box_rows), box_rows);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
