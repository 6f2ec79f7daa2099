// DeepSeek-V4 sparse attention with sinks on Hopper warpgroup MMA
// (launch_v4_sparse_attention_wgmma, deepseek_v4_kernels.h): the op of
// deepseek_v4_attention.cu (its reference) in MLA decode's wgmma layout
// (mla_decode_wgmma.cu, whose cp.async form this follows).
//
// One block (two warpgroups) a (query row, 64-head group): the heads are
// wgmma's M, and a row's gathered latents are both K and V. Shared memory:
// the queries [64, 512] and a 2-stage ring of 64-key tiles [64, 512], both in
// wgmma's 128-byte swizzle (8 panels of 64 columns); warpgroup 1 gathers the
// next tile by key_rows with cp.async while this one is multiplied. Per tile:
//   warpgroup 0: S = Q K^T [64, 64] over 512 dims (m64n64k16, both operands
//     from shared memory), the online softmax in registers (exp2, the scale
//     folded in; each head's max starts at its sink and its sum at 1, the
//     sink's own term: it sits in the denominator only), P and the rescale
//     factor to shared memory, then O[:, 0:256] += P V with P from registers;
//   warpgroup 1: waits for P (a named barrier), O[:, 256:512] += P V with P
//     by ldmatrix. V is the tile read as an MN-major B operand.
// The softmax weights enter P V as bf16. V4SoftmaxWeights::two_bf16_terms
// splits each into hi + lo (p to 2^-17, as the mma.sync kernel does, so the
// f32 reference's bound holds) at the cost of a second P V; one_bf16 is
// FlashMLA's precision (each weight to 2^-9 of itself).
// Then O / sum, the inverse rope of the tail, out_dt.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/backend/cuda/kernels/latent_wgmma_tile.cuh"
#include "sluice/backend/cuda/kernels/mma.cuh"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kHeads = 64;     // heads a block: wgmma's M
constexpr int kBlockN = 64;    // latents (keys) a tile
constexpr int kStages = 2;     // the tile multiplied and the one loading
constexpr int kWidth = kV4LatentDim;
constexpr int kPanels = kWidth / kWgmmaPanelCols;             // 8: QK's K dimension
constexpr int kPanelsPerGroup = kPanels / 2;                  // 4: O columns a warpgroup owns
constexpr int kQPanelBytes = kHeads * kWgmmaLineBytes;
constexpr int kTilePanelBytes = kBlockN * kWgmmaLineBytes;
constexpr int kQBytes = kPanels * kQPanelBytes;
constexpr int kTileBytes = kPanels * kTilePanelBytes;
constexpr int kPStride = kBlockN + 8;  // bf16: padded rows, conflict-free stores and ldmatrix
constexpr int kPBytes = kHeads * kPStride * 2;
constexpr int kPReadyBarrier = 1;  // warpgroup 0's P and rescale factors are in shared memory
constexpr float kLog2e = 1.4426950408889634f;

// 1024: alignment slack; P once or twice (hi, lo); the rescale factors; the
// output's rope rotation (cos, sin a pair of the tail, the block's one position).
constexpr int smem_bytes(bool two_terms) {
  return 1024 + kQBytes + kStages * kTileBytes + (two_terms ? 2 : 1) * kPBytes + kHeads * 4 + kWidth * 4;
}
static_assert(smem_bytes(true) <= 227 * 1024, "one block an SM: Hopper's opt-in shared memory");

template <bool kTwoTerms>
__global__ void __launch_bounds__(kThreads, 1) v4_sparse_attention_wgmma_kernel(V4SparseAttentionArgs a) {
  extern __shared__ unsigned char smem_raw[];
  const auto [smem_base, smem] = align_smem_1024(smem_raw);
  const std::uint32_t s_q = smem_base;
  const std::uint32_t s_tiles = smem_base + kQBytes;  // [kStages][kPanels][kBlockN][64]
  auto* s_p_hi = reinterpret_cast<__nv_bfloat16*>(smem + kQBytes + kStages * kTileBytes);  // [kHeads][kPStride]
  __nv_bfloat16* s_p_lo = s_p_hi + kHeads * kPStride;                                      // (kTwoTerms)
  auto* s_correction =
      reinterpret_cast<float*>(smem + kQBytes + kStages * kTileBytes + (kTwoTerms ? 2 : 1) * kPBytes);
  float* s_rope = s_correction + kHeads;  // [kWidth / 2][2]

  const int tid = threadIdx.x, lane = tid % 32;
  // Through a shuffle so the compiler knows it is uniform across the warp
  // (branches on it then do not serialize the asynchronous MMAs).
  const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp_in_group = (tid % 128) / 32;
  const int row = blockIdx.x, first_head = blockIdx.y * kHeads;
  const auto* q =
      static_cast<const __nv_bfloat16*>(a.q) + (static_cast<std::int64_t>(row) * a.num_heads + first_head) * kWidth;
  const auto* kv = static_cast<const __nv_bfloat16*>(a.kv);
  const int num_keys = a.num_keys[row];
  const std::int32_t* key_rows = a.key_rows + static_cast<std::int64_t>(row) * a.max_keys;

  load_latent_queries<kHeads, kWidth, kThreads>(smem, q, a.num_heads - first_head);
  const int num_tiles = (num_keys + kBlockN - 1) / kBlockN;
  // Warpgroup 1 gathers the tiles (warpgroup 0's S and softmax are the
  // critical path): warp w copies the tile's rows [16 w, 16 w + 16), lane
  // l < 16 reading row 16 w + l's pool row. Keys past num_keys are zeros:
  // their P is 0 and their V must be finite.
  constexpr int kRowsPerWarp = kBlockN / 4;
  auto load_tile = [&](int tile) {
    if (warpgroup != 1 || tile >= num_tiles) return;
    const int first_row = warp_in_group * kRowsPerWarp;
    const int key = tile * kBlockN + first_row + lane;
    gather_latent_rows<kBlockN, kRowsPerWarp, kWidth, 8>(smem + kQBytes + (tile % kStages) * kTileBytes, kv,
                                                         first_row, lane < kRowsPerWarp && key < num_keys ? key_rows[key] : -1,
                                                         lane);
  };
  load_tile(0);  // one commit group a tile, the first carrying Q too
  cp_async_commit();

  // This thread's heads (the accumulator layout: a warp's 16 rows, lane / 4 and + 8).
  const int row0 = warp_in_group * 16 + lane / 4;
  const float scale_log2 = a.softmax_scale * kLog2e;
  float o_acc[kPanelsPerGroup][32];  // [panel][n8 block * 4 + i]: this warpgroup's 256 dims
#pragma unroll
  for (int p = 0; p < kPanelsPerGroup; ++p)
#pragma unroll
    for (int k = 0; k < 32; ++k) o_acc[p][k] = 0.0f;
  // Warpgroup 0's running max (log2 units, from the sink) and sum (one lane
  // of the four a head holds the sink's 1; summed over them at the end).
  float m_run[2], l_run[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = first_head + row0 + 8 * h;
    m_run[h] = head < a.num_heads ? a.sinks[head] * kLog2e : 0.0f;
    l_run[h] = lane % 4 == 0 ? 1.0f : 0.0f;
  }
  std::uint32_t pa_hi[kBlockN / 16][4], pa_lo[kBlockN / 16][4];  // P as wgmma A fragments, 16 keys each

  // O[:, panels of this warpgroup] += P V over the tile's 64 keys.
  auto issue_pv = [&](std::uint32_t s_k, const std::uint32_t (&pa)[kBlockN / 16][4]) {
    const std::uint32_t s_v = s_k + warpgroup * kPanelsPerGroup * kTilePanelBytes;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int p = 0; p < kPanelsPerGroup; ++p)
        wgmma_m64n64k16_rs_tb(o_acc[p], pa[kk],
                              smem_desc(s_v + p * kTilePanelBytes + kk * 16 * kWgmmaLineBytes, 1024, 1024));
  };

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<0>();
    fence_proxy_async();
    // Also: both warpgroups are done with tile - 1 (their MMAs waited for),
    // whose stage the next load reuses, and warpgroup 1 has read P.
    __syncthreads();
    load_tile(tile + 1);
    cp_async_commit();
    const std::uint32_t s_k = s_tiles + (tile % kStages) * kTileBytes;

    if (warpgroup == 0) {
      // S = Q K^T: 32 k-steps of 16 dims; within a 128-byte line a k-step is
      // a 32-byte advance of the start address (the swizzle uses address bits).
      float s[32];
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kWidth / 16; ++ks) {
        const int panel = ks / 4, within = (ks % 4) * 32;
        wgmma_m64n64k16_ss(s, smem_desc(s_q + panel * kQPanelBytes + within, 16, 1024),
                           smem_desc(s_k + panel * kTilePanelBytes + within, 16, 1024), ks > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(s);

      // The running max is finite from the start: it starts at the sink.
      float correction[2], row_sum[2] = {0.0f, 0.0f};
      raise_running_max<kBlockN>(s, num_keys - tile * kBlockN, lane, scale_log2, m_run, correction);
      // The sum is of the weights P V multiplies (bf16, or hi + lo).
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float p0 = exp2f(fmaf(s[4 * j + 2 * h], scale_log2, -m_run[h]));
          const float p1 = exp2f(fmaf(s[4 * j + 2 * h + 1], scale_log2, -m_run[h]));
          const __nv_bfloat162 hi = __floats2bfloat162_rn(p0, p1);
          const float2 hi_f = __bfloat1622float2(hi);
          pa_hi[j / 2][(j % 2) * 2 + h] = *reinterpret_cast<const std::uint32_t*>(&hi);
          row_sum[h] += hi_f.x + hi_f.y;
          if constexpr (kTwoTerms) {
            const __nv_bfloat162 lo = __floats2bfloat162_rn(p0 - hi_f.x, p1 - hi_f.y);
            const float2 lo_f = __bfloat1622float2(lo);
            pa_lo[j / 2][(j % 2) * 2 + h] = *reinterpret_cast<const std::uint32_t*>(&lo);
            row_sum[h] += lo_f.x + lo_f.y;
          }
        }
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        const int key = 8 * j + 2 * (lane % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int offset = (row0 + 8 * h) * kPStride + key;
          *reinterpret_cast<std::uint32_t*>(s_p_hi + offset) = pa_hi[j / 2][(j % 2) * 2 + h];
          if constexpr (kTwoTerms) *reinterpret_cast<std::uint32_t*>(s_p_lo + offset) = pa_lo[j / 2][(j % 2) * 2 + h];
        }
      }
      if (lane % 4 == 0) {
        s_correction[row0] = correction[0];
        s_correction[row0 + 8] = correction[1];
      }
      named_barrier_arrive(kPReadyBarrier, kThreads);
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * correction[h] + row_sum[h];
      rescale_panels(o_acc, correction);
    } else {
      named_barrier_sync(kPReadyBarrier, kThreads);
      const float correction[2] = {s_correction[row0], s_correction[row0 + 8]};
      const int p_row = (warp_in_group * 16 + lane % 16) * kPStride + (lane / 16) * 8;
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        ldmatrix_x4(pa_hi[kk], s_p_hi + p_row + kk * 16);
        if constexpr (kTwoTerms) ldmatrix_x4(pa_lo[kk], s_p_lo + p_row + kk * 16);
      }
      rescale_panels(o_acc, correction);
    }
#pragma unroll
    for (int p = 0; p < kPanelsPerGroup; ++p) fence_registers(o_acc[p]);
    wgmma_fence();
    issue_pv(s_k, pa_hi);
    if constexpr (kTwoTerms) issue_pv(s_k, pa_lo);
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int p = 0; p < kPanelsPerGroup; ++p) fence_registers(o_acc[p]);
  }
  cp_async_wait<0>();  // a row without keys' queries
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  // Warpgroup 0 holds the sums; the rescale factors' slots carry 1 / sum to
  // warpgroup 1 once it has read the last tile's (sum >= the sink's term > 0).
  // The inverse rope's (cos, sin) once a pair for the block's heads (every
  // head of the row has its position): the large angles take sinf's slow path.
  __syncthreads();
  if (warpgroup == 0 && lane % 4 == 0) {
    s_correction[row0] = 1.0f / l_run[0];
    s_correction[row0 + 8] = 1.0f / l_run[1];
  }
  const int rope_begin = kWidth - a.rope.rope_dim;
  if (a.rope.inv_freq != nullptr && tid < a.rope.rope_dim / 2) {
    const float angle = a.rope.inv_freq[tid] * static_cast<float>(a.positions[row]);
    s_rope[2 * tid] = cosf(angle) * a.rope.cos_sin_scale;
    s_rope[2 * tid + 1] = -sinf(angle) * a.rope.cos_sin_scale;
  }
  __syncthreads();

  // O / sum, the inverse rope of the tail (pairs (d, d + 1), d even), out_dt.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = first_head + row0 + 8 * h;
    if (head >= a.num_heads) continue;
    const float inv_sum = s_correction[row0 + 8 * h];
    const std::int64_t out_base = (static_cast<std::int64_t>(row) * a.num_heads + head) * kWidth;
#pragma unroll
    for (int p = 0; p < kPanelsPerGroup; ++p)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int d = (warpgroup * kPanelsPerGroup + p) * kWgmmaPanelCols + 8 * j + 2 * (lane % 4);
        float even = o_acc[p][4 * j + 2 * h] * inv_sum, odd = o_acc[p][4 * j + 2 * h + 1] * inv_sum;
        if (a.rope.inv_freq != nullptr && d >= rope_begin) {
          // The inverse rotation (the reference's rope_tail(..., inverse = true)).
          const float c = s_rope[d - rope_begin], sn = s_rope[d - rope_begin + 1];
          const float e = even * c - odd * sn, o = odd * c + even * sn;
          even = e;
          odd = o;
        }
        store_f2(a.out, a.out_dt, out_base + d, even, odd);
      }
  }
}

template <bool kTwoTerms>
void launch_variant(const V4SparseAttentionArgs& args, cudaStream_t stream) {
  static const bool configured = [] {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(v4_sparse_attention_wgmma_kernel<kTwoTerms>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes(kTwoTerms)));
    return true;
  }();
  (void)configured;
  const int head_blocks = (args.num_heads + kHeads - 1) / kHeads;
  SLUICE_CHECK(head_blocks <= 65535);
  const dim3 grid(static_cast<unsigned>(args.rows), static_cast<unsigned>(head_blocks));
  v4_sparse_attention_wgmma_kernel<kTwoTerms><<<grid, kThreads, smem_bytes(kTwoTerms), stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_v4_sparse_attention_wgmma(const V4SparseAttentionArgs& args, V4SoftmaxWeights weights,
                                      cudaStream_t stream) {
  check_v4_sparse_attention_args(args);
  SLUICE_CHECK(reinterpret_cast<std::uintptr_t>(args.q) % 16 == 0 && reinterpret_cast<std::uintptr_t>(args.kv) % 16 == 0);
  if (args.rows == 0) return;
  if (weights == V4SoftmaxWeights::two_bf16_terms)
    launch_variant<true>(args, stream);
  else
    launch_variant<false>(args, stream);
}

}  // namespace sluice::cuda
