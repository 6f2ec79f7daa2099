// Causal paged attention for prefill chunks on tensor cores (FlashAttention-2
// style, mma.sync m16n8k16 bf16 with f32 accumulation; sm_80+ instructions,
// run here on sm_90a).
//
// One block per (query head, tile of 64 query rows of one sequence); four
// warps own 16 rows each. Queries sit at positions [p, p + n) of their
// sequence and read keys [0, position] from the paged cache, so a chunk with a
// cached prefix is the same code as a fresh prompt. K/V tiles of 64 keys are
// gathered page by page with cp.async into padded shared memory (row stride
// D + 8 keeps ldmatrix conflict-free), double-buffered. Keys past the last
// query are zero-filled, never read from unwritten pages (which may hold NaN).
#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kBlockM = kPrefillTileRows;  // query rows per block
constexpr int kBlockN = 64;                // keys per tile
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

struct PrefillParams {
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  const __nv_bfloat16* k_cache;
  const __nv_bfloat16* v_cache;
  int num_q_heads, num_kv_heads, block_size;
  float scale_log2;
};

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;  // 0: fill the 16 bytes with zeros
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
               "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n"); }

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a · b for one m16n8k16 tile.
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

template <int D>
__global__ void __launch_bounds__(kThreads) prefill_kernel(StepDeviceView step, PrefillParams p) {
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
  const int seq = step.prefill_tiles[2 * blockIdx.y];
  const int tile_row = step.prefill_tiles[2 * blockIdx.y + 1];
  const int seq_rows = step.seq_num_rows[seq];
  const int row_base = step.seq_row_begin[seq] + tile_row;
  const int num_q = min(kBlockM, seq_rows - tile_row);
  const int first_pos = step.seq_num_computed[seq] + tile_row;
  const int kv_end = first_pos + num_q;
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
  load_kv(0, 0);
  cp_async_commit();

  const int num_tiles = (kv_end + kBlockN - 1) / kBlockN;
  // This thread's two query rows (within the warp's 16) and their positions.
  const int r0 = warp * 16 + lane / 4;
  const int pos0 = first_pos + r0, pos1 = pos0 + 8;

  std::uint32_t q_frag[kKSteps][4];
  float o_acc[kNTilesO][4];
#pragma unroll
  for (int n = 0; n < kNTilesO; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) o_acc[n][i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait_all();
    __syncthreads();
    if (tile == 0) {
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks)
        ldmatrix_x4(q_frag[ks], s_q + (warp * 16 + (lane % 16)) * kStride + ks * 16 + (lane / 16) * 8);
    }
    if (tile + 1 < num_tiles) {
      load_kv(tile + 1, (tile + 1) & 1);
      cp_async_commit();
    }
    const __nv_bfloat16* sk = s_k + (tile & 1) * kBlockN * kStride;
    const __nv_bfloat16* sv = s_v + (tile & 1) * kBlockN * kStride;

    // S = Q K^T for this warp's 16 rows x 64 keys.
    float s[kNTilesS][4];
#pragma unroll
    for (int n = 0; n < kNTilesS; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
      for (int n = 0; n < kNTilesS; n += 2) {
        std::uint32_t b[4];
        ldmatrix_x4(b, sk + (n * 8 + (lane % 8) + (lane / 16) * 8) * kStride + ks * 16 +
                           ((lane / 8) % 2) * 8);
        mma_16816(s[n], q_frag[ks], b[0], b[1]);
        mma_16816(s[n + 1], q_frag[ks], b[2], b[3]);
      }
    }
    // Causal mask: only tiles that reach past the first query's position.
    const int key0 = tile * kBlockN;
    const bool needs_mask = key0 + kBlockN - 1 > first_pos;
    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = key0 + n * 8 + (lane % 4) * 2 + (i & 1);
        const int pos = i < 2 ? pos0 : pos1;
        float v = s[n][i] * p.scale_log2;
        if (needs_mask && key > pos) v = -INFINITY;
        s[n][i] = v;
        row_max[i / 2] = fmaxf(row_max[i / 2], v);
      }
    }
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 1));
      row_max[h] = fmaxf(row_max[h], __shfl_xor_sync(0xffffffffu, row_max[h], 2));
      const float m_new = fmaxf(m_run[h], row_max[h]);
      correction[h] = m_new == -INFINITY ? 1.0f : exp2f(m_run[h] - m_new);
      m_run[h] = m_new;
    }
    float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float m = m_run[i / 2];
        const float pr = m == -INFINITY ? 0.0f : exp2f(s[n][i] - m);
        s[n][i] = pr;
        row_sum[i / 2] += pr;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * correction[h] + row_sum[h];
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n) {
      o_acc[n][0] *= correction[0];
      o_acc[n][1] *= correction[0];
      o_acc[n][2] *= correction[1];
      o_acc[n][3] *= correction[1];
    }
    // O += P V: P's accumulator layout is the A fragment layout of the next mma.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      std::uint32_t a[4];
      a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int n = 0; n < kNTilesO; n += 2) {
        std::uint32_t b[4];
        ldmatrix_x4_trans(b, sv + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride + n * 8 +
                                 (lane / 16) * 8);
        mma_16816(o_acc[n], a, b[0], b[1]);
        mma_16816(o_acc[n + 1], a, b[2], b[3]);
      }
    }
  }
  // Row sums are partial per lane: finish them across the four lanes of a row.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + h * 8;
    if (r >= num_q) continue;
    const float inv = 1.0f / l_run[h];
    __nv_bfloat16* dst = p.out + (static_cast<std::int64_t>(row_base + r) * p.num_q_heads + head) * D;
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n) {
      const int col = n * 8 + (lane % 4) * 2;
      *reinterpret_cast<__nv_bfloat162*>(dst + col) =
          __floats2bfloat162_rn(o_acc[n][2 * h] * inv, o_acc[n][2 * h + 1] * inv);
    }
  }
}

template <int D>
void launch_for_dim(const StepDeviceView& step, const AttentionArgs& args, cudaStream_t stream) {
  PrefillParams p{};
  p.q = static_cast<const __nv_bfloat16*>(args.q);
  p.out = static_cast<__nv_bfloat16*>(args.out);
  p.k_cache = static_cast<const __nv_bfloat16*>(args.k_cache);
  p.v_cache = static_cast<const __nv_bfloat16*>(args.v_cache);
  p.num_q_heads = args.num_q_heads;
  p.num_kv_heads = args.num_kv_heads;
  p.block_size = args.block_size_tokens;
  p.scale_log2 = args.scale * kLog2e;
  constexpr int smem_bytes = (kBlockM + 4 * kBlockN) * (D + 8) * 2;
  static bool attribute_set = false;  // once per process: the limit is per kernel
  if (!attribute_set) {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<D>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    attribute_set = true;
  }
  const dim3 grid(args.num_q_heads, step.num_prefill_tiles);
  prefill_kernel<D><<<grid, kThreads, smem_bytes, stream>>>(step, p);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool prefill_kernel_supports(std::int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

void launch_attention_prefill(const StepDeviceView& step, const AttentionArgs& args,
                              cudaStream_t stream) {
  if (step.num_prefill_tiles == 0) return;
  switch (args.head_dim) {
    case 64: launch_for_dim<64>(step, args, stream); break;
    case 128: launch_for_dim<128>(step, args, stream); break;
    default: SLUICE_CHECK_MSG(false, "prefill attention: unsupported head_dim");
  }
}

}  // namespace sluice::cuda
