// Small-batch GEMV for decode: out[m, n] = x[m, :] · w[n, :] for m <= kGemvMaxRows,
// bf16 inputs, f32 accumulation. cuBLASLt picks split-K kernels plus a reduce
// kernel for these shapes and reached 1.4-2.6 TB/s on the q/k/v/o projections
// (ncu on the H200).
//
// A warp streams one weight row (or, with split K, one of 2-4 parts of it:
// weights of few rows, e.g. o_proj and down_proj at 4096 rows, fill under one
// wave of warp slots otherwise) with 16-byte loads, four in flight per lane.
// Each warp loads its first iteration's weights into registers before
// pdl_wait(): weights never change, so they stream while the previous kernel
// (which produced x) drains. Weights are loaded past L1 (no_allocate), so x
// stays there for the multiprocessor's other warps. Together, in the
// stand-alone decode chain (bench/cuda/gemv_chain_bench.cu, session 11) a
// step took 4,423-4,465 us where the L2 prefetch of 2 KB a warp and
// L1-allocating loads took 4,550 (runs gemv1-2..8); batch-1 decode at 4k in
// cuda_bench 212.4 -> 220.6 tok/s (gemv1-7, -8).
//
// Three fusions: several output tensors (the q|k|v projection writes q, k and v
// from one pass over the stacked weight), the SwiGLU epilogue (a warp
// reads gate row i and up row I + i of the stacked gate|up weight and writes
// silu(gate) * up, so neither the [m, 2I] intermediate nor the silu kernel
// exists), and RoPE with the KV page write as the q|k|v GEMV's epilogue
// (gemv_qkv_rope_kernel; decode steps under graphs).
//
// Deleted after losing their benchmarks (docs/benchmarks.md, runs 8-10): a
// predicated 8-deep loop and rows split over warps on the 40-66-register
// kernel (66-77% of HBM where the 32-register loop reads 83-102%; split K on
// that loop replaced the row split).
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/launch.cuh"

namespace sluice::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// Blocks a multiprocessor for the plain, split-K and q|k|v kernels at kRows
// rows; one row takes kOneRowBlocks (set_gemv_one_row_blocks).
constexpr int min_blocks(int rows, int one_row_blocks) {
  return rows == 1 ? one_row_blocks : rows == 2 ? 6 : rows == 3 ? 3 : 4;
}
constexpr int kOneRowBlocks = kGemvOneRowBlocksDefault;
constexpr int kOneRowBlocksOther = 8;  // the 32-register form, the default until session 43
int g_one_row_blocks = kOneRowBlocks;

template <int kRows>
constexpr std::integral_constant<int, kRows> rows_c{};
template <int kBlocks>
constexpr std::integral_constant<int, kBlocks> blocks_c{};
// Calls run(blocks_c<B>) with the one-row kernels' blocks an SM set now.
template <class Run>
void with_one_row_blocks(const Run& run) {
  if (g_one_row_blocks == kOneRowBlocksOther) run(blocks_c<kOneRowBlocksOther>);
  else run(blocks_c<kOneRowBlocks>);
}

__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  const __nv_bfloat162* ha = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* hb = reinterpret_cast<const __nv_bfloat162*>(&b);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(ha[i]), fb = __bfloat1622float2(hb[i]);
    s += fa.x * fb.x + fa.y * fb.y;
  }
  return s;
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

struct SwiGluParams {
  const uint4* x;  // [m, k_vecs]
  const uint4* w;  // [2 * inter, k_vecs]: the gate rows, then the up rows
  void* out;       // [m, inter]
  Dt out_dt;
  int inter;
  int k_vecs;
};

// The gate|up GEMV with the SwiGLU epilogue: one warp per intermediate column
// reads both its gate and up rows, four 16-byte loads of each in flight per
// lane, then a one-load remainder loop. At one row (64 registers) it read
// 92.5% of HBM where pairs of 32-register warps, a row each, read 89% (S3-d1).
//
// The first iteration's weights (4 KB a warp) are loaded into registers
// before pdl_wait(), and the loop is rotated (math, then the next loads) so
// they take no registers beyond the loop's own. Resident blocks so hold their
// first bytes when the norm before them ends; the L2 prefetch this replaced
// left each warp a round trip to L2 after the wait. Session 11 (gemv1): in
// the stand-alone decode chain this alone took a step 4,550 -> 4,488 us and
// the kernel 62 -> 56 us a layer (runs gemv1-2, gemv1-3).
template <int kRows>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, kRows != 1 ? 1 : 4) gemv_swiglu_kernel(SwiGluParams p) {
  constexpr int kU = 4;  // loads in flight per row
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int item = blockIdx.x * kWarpsPerBlock + warp;
  const bool active = item < p.inter;
  const int end = active ? p.k_vecs : 0;
  const uint4* wrow[2];
  wrow[0] = p.w + static_cast<std::int64_t>(active ? item : 0) * p.k_vecs;
  wrow[1] = p.w + static_cast<std::int64_t>(p.inter + (active ? item : 0)) * p.k_vecs;
  pdl_launch_dependents();
  // Every lane has a whole first iteration (else the remainder loop does all).
  const bool full = end >= 32 * kU;
  uint4 wv[2][kU];
  if (full) {
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int r = 0; r < 2; ++r) wv[r][u] = load_weight(wrow[r] + lane + 32 * u);
  }
  pdl_wait();

  float acc[2][kRows];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc[r][m] = 0.0f;
  int kv0 = lane;
  if (full) {
    for (;;) {
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          const uint4 xv = p.x[static_cast<std::int64_t>(m) * p.k_vecs + kv0 + 32 * u];
#pragma unroll
          for (int r = 0; r < 2; ++r) acc[r][m] += dot8(wv[r][u], xv);
        }
      kv0 += 32 * kU;
      if (kv0 + 32 * (kU - 1) >= end) break;
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int r = 0; r < 2; ++r) wv[r][u] = load_weight(wrow[r] + kv0 + 32 * u);
    }
  }
  for (; kv0 < end; kv0 += 32) {
    uint4 w1[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) w1[r] = load_weight(wrow[r] + kv0);
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const uint4 xv = p.x[static_cast<std::int64_t>(m) * p.k_vecs + kv0];
#pragma unroll
      for (int r = 0; r < 2; ++r) acc[r][m] += dot8(w1[r], xv);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc[r][m] = warp_sum(acc[r][m]);
  if (lane != 0 || !active) return;
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    // Rounded as the unfused path stores gate and up before silu_mul reads them.
    const float g = round_bf16(acc[0][m]), u = round_bf16(acc[1][m]);
    store_f(p.out, p.out_dt, static_cast<std::int64_t>(m) * p.inter + item, g / (1.0f + __expf(-g)) * u);
  }
}

// Where the plain GEMV's output columns go: up to three row-major tensors
// (the q|k|v projection writes q, k and v from one pass over the stacked
// weight); unused parts have begin INT_MAX.
struct PlainOutputs {
  void* data[3];
  int begin[3];
  int cols[3];
  Dt dt;
};

// The first iteration of accumulate_dot8's loop (four vectors a lane from kv),
// loaded before pdl_wait(); false (nothing loaded) when some lane has no whole
// iteration in [kv, end), and the one-load loop then does the row.
__device__ __forceinline__ bool load_first_weights(const uint4* __restrict__ wrow, int kv, int end, uint4 (&wv)[4]) {
  const bool full = end - (kv - (threadIdx.x & 31)) >= 32 * 4;
  if (full) {
#pragma unroll
    for (int u = 0; u < 4; ++u) wv[u] = load_weight(wrow + kv + 32 * u);
  }
  return full;
}

// acc[m] += w_row . x_m over the 8-element vectors [kv, end) of a row, this
// lane taking every 32nd from kv, four loads in flight (the loop of both
// single-output kernels). `wv` holds the first iteration's weights when
// `full` (load_first_weights); the loop is rotated (math, then the next
// loads) so they cost no registers beyond the loop's own.
template <int kRows>
__device__ __forceinline__ void accumulate_dot8(const uint4* __restrict__ wrow, const uint4* __restrict__ x,
                                                int k_vecs, int kv, int end, bool full, uint4 (&wv)[4],
                                                float (&acc)[kRows]) {
  constexpr int kU = 4;
  if (full) {
    for (;;) {
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int m = 0; m < kRows; ++m) acc[m] += dot8(wv[u], x[m * k_vecs + kv + 32 * u]);
      kv += 32 * kU;
      if (kv + 32 * (kU - 1) >= end) break;
#pragma unroll
      for (int u = 0; u < kU; ++u) wv[u] = load_weight(wrow + kv + 32 * u);
    }
  }
  for (; kv < end; kv += 32) {
    const uint4 w1 = load_weight(wrow + kv);
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc[m] += dot8(w1, x[m * k_vecs + kv]);
  }
}

// The plain GEMV (o_proj, down_proj, lm_head, and q|k|v through `out`'s
// parts): the first version's loop and arguments, plus PDL. Occupancy is what
// keeps bytes in flight here: that version took 32 registers (8 blocks = 64
// warps a multiprocessor) and read 91-100% of HBM; a rewrite that took 40-66
// registers for the same loop (5-6 blocks) read 66-77% (runs 9, 10).
// The parts cost only the store's part choice, made once per column.
template <int kRows, int kOneRow = kOneRowBlocks>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, min_blocks(kRows, kOneRow))
    gemv_plain_kernel(const uint4* __restrict__ x, const uint4* __restrict__ w, PlainOutputs out, int n,
                      int k_vecs) {
  const int lane = threadIdx.x & 31;
  const int col = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  pdl_launch_dependents();
  if (col >= n) {
    pdl_wait();
    return;
  }
  const uint4* wrow = w + static_cast<std::int64_t>(col) * k_vecs;
  // The first iteration's weights go to registers before the wait. With the
  // rotated loop they cost no occupancy (32 registers at 8 blocks an SM, where
  // ptxas spills 12-20 bytes at one row; the one-row default since session 43
  // is 6 blocks, 40 registers, no spill). The L2 prefetch of 2 KB a warp they
  // replaced left a round trip to L2 after the wait.
  uint4 wv[4];
  const bool full = load_first_weights(wrow, lane, k_vecs, wv);
  pdl_wait();
  float acc[kRows] = {};
  accumulate_dot8<kRows>(wrow, x, k_vecs, lane, k_vecs, full, wv, acc);
  // Selects, not a runtime index into the parameter struct (that copies it to the stack).
  const bool in2 = col >= out.begin[2], in1 = col >= out.begin[1];
  void* const dst = in2 ? out.data[2] : in1 ? out.data[1] : out.data[0];
  const int dst_cols = in2 ? out.cols[2] : in1 ? out.cols[1] : out.cols[0];
  const int dst_col = col - (in2 ? out.begin[2] : in1 ? out.begin[1] : out.begin[0]);
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const float total = warp_sum(acc[m]);
    if (lane == 0) store_f(dst, out.dt, static_cast<std::int64_t>(m) * dst_cols + dst_col, total);
  }
}

// Split K on the plain loop: kParts warps a row (32 registers, eight blocks a
// multiprocessor). A block's eight warps are kParts groups of 8 / kParts; group
// g reads part g of the same rows, and the other parts add into part 0 through
// shared memory. For weights of few rows (q|k|v at 6144, o_proj and down_proj
// at 4096), whose one-warp-a-row grid fills under one wave of warp slots:
// o_proj read 62% of HBM that way, down_proj 82%, q|k|v 66% (run 11); two
// parts gave 71%, 89% and 74% (session 3).
template <int kRows, int kParts, int kOneRow = kOneRowBlocks>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, min_blocks(kRows, kOneRow))
    gemv_split_k_kernel(const uint4* __restrict__ x, const uint4* __restrict__ w, PlainOutputs out, int n,
                        int k_vecs) {
  static_assert(kParts >= 2 && kWarpsPerBlock % kParts == 0);
  constexpr int kItems = kWarpsPerBlock / kParts;
  __shared__ float s_part[kParts - 1][kItems][kRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp / kItems, slot = warp % kItems;
  const int item = blockIdx.x * kItems + slot;
  const bool active = item < n;
  // Parts of whole 32-vector strides; the last takes the rest.
  const int part_vecs = min(k_vecs, (k_vecs / kParts + 31) / 32 * 32);
  const int begin = min(k_vecs, part * part_vecs);
  const int end = part == kParts - 1 ? k_vecs : min(k_vecs, begin + part_vecs);
  const uint4* wrow = w + static_cast<std::int64_t>(active ? item : 0) * k_vecs;
  pdl_launch_dependents();
  uint4 wv[4];
  const bool full = active && load_first_weights(wrow, begin + lane, end, wv);
  pdl_wait();
  float acc[kRows] = {};
  if (active) accumulate_dot8<kRows>(wrow, x, k_vecs, begin + lane, end, full, wv, acc);
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = warp_sum(acc[m]);
  if (part > 0 && lane == 0)
#pragma unroll
    for (int m = 0; m < kRows; ++m) s_part[part - 1][slot][m] = acc[m];
  __syncthreads();
  if (part > 0 || lane != 0 || !active) return;
#pragma unroll
  for (int q = 0; q < kParts - 1; ++q)
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc[m] += s_part[q][slot][m];
  const bool in2 = item >= out.begin[2], in1 = item >= out.begin[1];
  void* const dst = in2 ? out.data[2] : in1 ? out.data[1] : out.data[0];
  const int dst_cols = in2 ? out.cols[2] : in1 ? out.cols[1] : out.cols[0];
  const int dst_col = item - (in2 ? out.begin[2] : in1 ? out.begin[1] : out.begin[0]);
#pragma unroll
  for (int m = 0; m < kRows; ++m) store_f(dst, out.dt, static_cast<std::int64_t>(m) * dst_cols + dst_col, acc[m]);
}

// The q|k|v GEMV of a decode step with RoPE and the KV page write as its
// epilogue (CudaOptions::decode_rope_fusion): what gemv_split_k_kernel, then
// rope_kv_write_kernel (elementwise.cu) compute, in one kernel, so nothing
// runs between the GEMV and attention. A block's warps take pairs of output
// columns (d, d + half) of one head (head = a q, k or v head of the stacked
// weight's rows), kParts warps a column as in the split-K kernel; after the
// parts' sum, one thread a (pair, row) rounds both columns to bf16 (as the
// unfused GEMV stores them), rotates q and k pairs by the row's position
// (the same f32 angle and sincosf), and stores them, k and v also to their
// pages. Every column of one launch is written by exactly one thread.
struct QkvRopeParams {
  const uint4* x;  // [m, k_vecs]
  const uint4* w;  // [(num_q_heads + 2 * num_kv_heads) * head_dim, k_vecs]
  __nv_bfloat16* q;
  __nv_bfloat16* k;
  __nv_bfloat16* v;
  __nv_bfloat16* k_cache;
  __nv_bfloat16* v_cache;
  const float* inv_freq;  // [head_dim / 2]
  const std::int32_t* positions;
  const std::int32_t* row_sequence;
  const std::int32_t* seq_block_offset;
  const std::int32_t* block_tables;
  int num_q_heads, num_kv_heads, head_dim, block_size, k_vecs;
};

template <int kRows, int kParts, int kOneRow = kOneRowBlocks>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, min_blocks(kRows, kOneRow))
    gemv_qkv_rope_kernel(QkvRopeParams p) {
  static_assert(kWarpsPerBlock % (2 * kParts) == 0);
  constexpr int kItems = kWarpsPerBlock / kParts;  // columns a block
  constexpr int kPairs = kItems / 2;
  __shared__ float s_part[kParts][kItems][kRows];  // [0]: the totals
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp / kItems, slot = warp % kItems;
  const int half = p.head_dim / 2;
  // Slot 2i and 2i + 1 are pair i's columns d and d + half.
  const int pair = blockIdx.x * kPairs + slot / 2;
  const int head = pair / half, d = pair % half;
  const int col = head * p.head_dim + d + (slot % 2) * half;
  const int part_vecs = kParts == 1 ? p.k_vecs : min(p.k_vecs, (p.k_vecs / kParts + 31) / 32 * 32);
  const int begin = min(p.k_vecs, part * part_vecs);
  const int end = part == kParts - 1 ? p.k_vecs : min(p.k_vecs, begin + part_vecs);
  const uint4* wrow = p.w + static_cast<std::int64_t>(col) * p.k_vecs;
  pdl_launch_dependents();
  uint4 wv[4];
  const bool full = load_first_weights(wrow, begin + lane, end, wv);
  pdl_wait();
  float acc[kRows] = {};
  accumulate_dot8<kRows>(wrow, p.x, p.k_vecs, begin + lane, end, full, wv, acc);
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = warp_sum(acc[m]);
  if (lane == 0)
#pragma unroll
    for (int m = 0; m < kRows; ++m) s_part[part][slot][m] = acc[m];
  __syncthreads();
  if (static_cast<int>(threadIdx.x) >= kPairs * kRows) return;
  const int my_pair = threadIdx.x / kRows, m = threadIdx.x % kRows;
  float x1 = 0.0f, x2 = 0.0f;
#pragma unroll
  for (int q = 0; q < kParts; ++q) {
    x1 += s_part[q][2 * my_pair][m];
    x2 += s_part[q][2 * my_pair + 1][m];
  }
  x1 = round_bf16(x1);
  x2 = round_bf16(x2);
  const int pair_here = blockIdx.x * kPairs + my_pair;
  const int h = pair_here / half, dd = pair_here % half;
  const int pos = p.positions[m];
  const bool is_q = h < p.num_q_heads, is_k = !is_q && h < p.num_q_heads + p.num_kv_heads;
  if (is_q || is_k) {
    float sn, cs;
    sincosf(static_cast<float>(pos) * p.inv_freq[dd], &sn, &cs);
    const float y1 = x1 * cs - x2 * sn, y2 = x2 * cs + x1 * sn;
    x1 = y1;
    x2 = y2;
  }
  const __nv_bfloat16 b1 = __float2bfloat16(x1), b2 = __float2bfloat16(x2);
  if (is_q) {
    __nv_bfloat16* dst = p.q + (static_cast<std::int64_t>(m) * p.num_q_heads + h) * p.head_dim + dd;
    dst[0] = b1;
    dst[half] = b2;
    return;
  }
  const int kv_head = is_k ? h - p.num_q_heads : h - p.num_q_heads - p.num_kv_heads;
  const std::int64_t kv_width = static_cast<std::int64_t>(p.num_kv_heads) * p.head_dim;
  const std::int64_t in_row = static_cast<std::int64_t>(kv_head) * p.head_dim + dd;
  __nv_bfloat16* dst = (is_k ? p.k : p.v) + m * kv_width + in_row;
  dst[0] = b1;
  dst[half] = b2;
  const int block = p.block_tables[p.seq_block_offset[p.row_sequence[m]] + pos / p.block_size];
  const std::int64_t page_slot = static_cast<std::int64_t>(block) * p.block_size + pos % p.block_size;
  __nv_bfloat16* cache = (is_k ? p.k_cache : p.v_cache) + page_slot * kv_width + in_row;
  cache[0] = b1;
  cache[half] = b2;
}

// Launches the instance of a row-count-templated single-output kernel for m
// rows (1-4): kernel_of(rows, one_row_blocks), both std::integral_constants,
// names it.
template <class KernelOf>
void launch_for_rows(const KernelOf& kernel_of, std::int64_t m, dim3 grid, const void* x, const void* w,
                     const PlainOutputs& out, std::int64_t n, std::int64_t k, const Launch& launch) {
  const dim3 block(kWarpsPerBlock * 32);
  const auto* xv = static_cast<const uint4*>(x);
  const auto* wv = static_cast<const uint4*>(w);
  const int nn = static_cast<int>(n), kv = static_cast<int>(k / 8);
  const auto run = [&](auto rows, auto blocks) {
    launch_kernel(kernel_of(rows, blocks), grid, block, 0, launch, xv, wv, out, nn, kv);
  };
  switch (m) {
    case 1: with_one_row_blocks([&](auto blocks) { run(rows_c<1>, blocks); }); break;
    case 2: run(rows_c<2>, blocks_c<kOneRowBlocks>); break;
    case 3: run(rows_c<3>, blocks_c<kOneRowBlocks>); break;
    default: run(rows_c<4>, blocks_c<kOneRowBlocks>); break;
  }
}

template <int kParts>
void launch_split_k(const void* x, const void* w, const PlainOutputs& out, std::int64_t m, std::int64_t n,
                    std::int64_t k, const Launch& launch) {
  constexpr int kItems = kWarpsPerBlock / kParts;
  const auto kernel_of = [](auto rows, auto blocks) {
    return gemv_split_k_kernel<decltype(rows)::value, kParts, decltype(blocks)::value>;
  };
  launch_for_rows(kernel_of, m, dim3(static_cast<unsigned>((n + kItems - 1) / kItems)), x, w, out, n, k, launch);
}

void launch_plain(const void* x, const void* w, const PlainOutputs& out, std::int64_t m, std::int64_t n,
                  std::int64_t k, const Launch& launch) {
  const auto kernel_of = [](auto rows, auto blocks) {
    return gemv_plain_kernel<decltype(rows)::value, decltype(blocks)::value>;
  };
  launch_for_rows(kernel_of, m, dim3(static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock)), x, w, out, n,
                  k, launch);
}

// Warps a row for the plain loop (1: no split). Split K when one warp a row
// fills under one wave of warp slots (132 SMs x 64) and each part keeps a full
// loop (four loads a lane); of 2 and 4 parts, 4 only when its waves are
// clearly fuller on average: q|k|v's 6144 rows are 1.45 waves in 2 parts (73%
// full), 2.9 in 4 (97%); o_proj's and down_proj's 4096 are 0.97 and 1.94 (97%
// both), so they keep 2. GemvSplitK::two_parts never picks 4. One warp a row
// for these weights lost everywhere (batch 1 @ 4k -5.6%, S3-d2).
int gemv_split_k_parts(std::int64_t n, std::int64_t k, GemvSplitK split_k) {
  constexpr double kWarpSlots = 132.0 * 64.0;
  if (n > kWarpSlots) return 1;
  auto fits = [&](int parts) { return k / 8 >= parts * 32 * 4; };
  auto fill = [&](int parts) {
    const double waves = static_cast<double>(n) * parts / kWarpSlots;
    return waves / std::ceil(waves);
  };
  if (!fits(2)) return 1;
  return split_k == GemvSplitK::by_waves && fits(4) && fill(4) > fill(2) + 0.1 ? 4 : 2;
}

bool covered(std::int64_t m, std::int64_t n, std::int64_t k) {
  return m >= 1 && m <= kGemvMaxRows && k % 8 == 0 && n >= 1 && n < (1LL << 30) && k / 8 < (1LL << 30);
}

}  // namespace

void set_gemv_one_row_blocks(int blocks) {
  SLUICE_CHECK_MSG(blocks == kOneRowBlocks || blocks == kOneRowBlocksOther, "set_gemv_one_row_blocks: 6 or 8");
  g_one_row_blocks = blocks;
}

bool launch_gemv(const void* x, const void* w, const GemvOutputs& out, std::int64_t m, std::int64_t k,
                 GemvSplitK split_k, const Launch& launch) {
  std::int64_t n = 0;
  for (int j = 0; j < out.num_parts; ++j) n += out.cols[j];
  if (out.num_parts < 1 || out.num_parts > 3 || !covered(m, n, k)) return false;
  PlainOutputs plain{};
  std::int64_t at = 0;
  for (int j = 0; j < 3; ++j) {
    const bool used = j < out.num_parts;
    plain.data[j] = used ? out.data[j] : nullptr;
    plain.begin[j] = used ? static_cast<int>(at) : INT_MAX;
    plain.cols[j] = used ? static_cast<int>(out.cols[j]) : 0;
    if (used) at += out.cols[j];
  }
  plain.dt = out.dt;
  switch (gemv_split_k_parts(n, k, split_k)) {
    case 4: launch_split_k<4>(x, w, plain, m, n, k, launch); break;
    case 2: launch_split_k<2>(x, w, plain, m, n, k, launch); break;
    default: launch_plain(x, w, plain, m, n, k, launch); break;
  }
  return true;
}

bool launch_gemv_qkv_rope(const StepDeviceView& step, const GemvQkvRopeArgs& args, std::int64_t m, std::int64_t k,
                          GemvSplitK split_k, const Launch& launch) {
  const std::int64_t heads = args.num_q_heads + 2LL * args.num_kv_heads;
  const std::int64_t n = heads * args.head_dim;
  if (!covered(m, n, k) || m != step.num_rows || args.head_dim % 2 != 0) return false;
  const int parts = gemv_split_k_parts(n, k, split_k);
  const int pairs_per_block = kWarpsPerBlock / parts / 2;
  if ((args.head_dim / 2) % pairs_per_block != 0) return false;  // a block's pairs in one head
  const QkvRopeParams p{.x = static_cast<const uint4*>(args.x),
                        .w = static_cast<const uint4*>(args.w_qkv),
                        .q = static_cast<__nv_bfloat16*>(args.q),
                        .k = static_cast<__nv_bfloat16*>(args.k),
                        .v = static_cast<__nv_bfloat16*>(args.v),
                        .k_cache = static_cast<__nv_bfloat16*>(args.k_cache),
                        .v_cache = static_cast<__nv_bfloat16*>(args.v_cache),
                        .inv_freq = args.inv_freq,
                        .positions = step.positions,
                        .row_sequence = step.row_sequence,
                        .seq_block_offset = step.seq_block_offset,
                        .block_tables = step.block_tables,
                        .num_q_heads = args.num_q_heads,
                        .num_kv_heads = args.num_kv_heads,
                        .head_dim = args.head_dim,
                        .block_size = args.block_size,
                        .k_vecs = static_cast<int>(k / 8)};
  const dim3 grid(static_cast<unsigned>(heads * (args.head_dim / 2) / pairs_per_block));
  const dim3 block(kWarpsPerBlock * 32);
  auto launch_parts = [&](auto parts_c) {
    constexpr int kP = decltype(parts_c)::value;
    switch (m) {
      case 1:
        with_one_row_blocks([&](auto blocks) {
          launch_kernel(gemv_qkv_rope_kernel<1, kP, decltype(blocks)::value>, grid, block, 0, launch, p);
        });
        break;
      case 2: launch_kernel(gemv_qkv_rope_kernel<2, kP>, grid, block, 0, launch, p); break;
      case 3: launch_kernel(gemv_qkv_rope_kernel<3, kP>, grid, block, 0, launch, p); break;
      default: launch_kernel(gemv_qkv_rope_kernel<4, kP>, grid, block, 0, launch, p); break;
    }
  };
  switch (parts) {
    case 4: launch_parts(std::integral_constant<int, 4>{}); break;
    case 2: launch_parts(std::integral_constant<int, 2>{}); break;
    default: launch_parts(std::integral_constant<int, 1>{}); break;
  }
  SLUICE_CUDA_CHECK_LAUNCH();
  return true;
}

bool launch_gemv_swiglu(const void* x, const void* w_gate_up, void* out, Dt out_dt, std::int64_t m,
                        std::int64_t inter, std::int64_t k, const Launch& launch) {
  if (!covered(m, 2 * inter, k)) return false;
  const SwiGluParams p{.x = static_cast<const uint4*>(x),
                       .w = static_cast<const uint4*>(w_gate_up),
                       .out = out,
                       .out_dt = out_dt,
                       .inter = static_cast<int>(inter),
                       .k_vecs = static_cast<int>(k / 8)};
  const dim3 grid(static_cast<unsigned>((p.inter + kWarpsPerBlock - 1) / kWarpsPerBlock));
  const dim3 block(kWarpsPerBlock * 32);
  switch (m) {
    case 1: launch_kernel(gemv_swiglu_kernel<1>, grid, block, 0, launch, p); break;
    case 2: launch_kernel(gemv_swiglu_kernel<2>, grid, block, 0, launch, p); break;
    case 3: launch_kernel(gemv_swiglu_kernel<3>, grid, block, 0, launch, p); break;
    default: launch_kernel(gemv_swiglu_kernel<4>, grid, block, 0, launch, p); break;
  }
  return true;
}

}  // namespace sluice::cuda
