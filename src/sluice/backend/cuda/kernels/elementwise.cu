// Row-wise and element-wise kernels: embedding, RMSNorm (plain and fused with
// the residual add), SwiGLU, row gather, bias, RoPE, KV page writes, and the
// device-side random fill used by benchmarks. All memory-bound; f32 math.
#include <cuda_bf16.h>

#include <algorithm>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/launch.cuh"

namespace sluice::cuda {
namespace {

constexpr int kRowThreads = 256;

__global__ void embedding_kernel(const std::int32_t* token_ids, const void* table, Dt table_dt,
                                 std::int64_t hidden, void* out, Dt out_dt) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t row = blockIdx.x;
  const std::int64_t token = token_ids[row];
  for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x)
    store_f(out, out_dt, row * hidden + c, load_f(table, table_dt, token * hidden + c));
}

// One block per row. The row is read twice (sum of squares, then scale); the
// second read hits L1/L2 for hidden sizes up to tens of thousands.
__global__ void rms_norm_kernel(const void* x, Dt x_dt, const void* weight, Dt w_dt, float eps,
                                std::int64_t cols, void* out, Dt out_dt) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float scratch[32];
  const std::int64_t base = blockIdx.x * cols;
  float sum_sq = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = load_f(x, x_dt, base + c);
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(cols) + eps);
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    store_f(out, out_dt, base + c, load_f(x, x_dt, base + c) * inv_rms * load_f(weight, w_dt, c));
}

// residual += x, then out = rms_norm(residual). The norm reads the residual
// as stored (rounded to its dtype), as an unfused add followed by a norm would.
__global__ void add_rms_norm_kernel(void* residual, Dt r_dt, const void* x, Dt x_dt,
                                    const void* weight, Dt w_dt, float eps, std::int64_t cols,
                                    void* out, Dt out_dt) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float scratch[32];
  const std::int64_t base = blockIdx.x * cols;
  float sum_sq = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    store_f(residual, r_dt, base + c, load_f(residual, r_dt, base + c) + load_f(x, x_dt, base + c));
    const float v = load_f(residual, r_dt, base + c);
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(cols) + eps);
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    store_f(out, out_dt, base + c,
            load_f(residual, r_dt, base + c) * inv_rms * load_f(weight, w_dt, c));
}

// The bf16 fast path of rms_norm / add_rms_norm: a row lives in registers
// (kVecs 16-byte vectors a thread), so the residual is read once and written
// once, with independent loads. The generic kernels above re-read through
// possibly aliasing pointers, a chain of dependent accesses that took 22 us a
// row at hidden 4096 (profiled on the H200).
template <int kVecs, bool kAdd>
__global__ void norm_bf16_kernel(uint4* residual, const uint4* x, const void* weight, Dt w_dt, float eps,
                                 int vecs_per_row, int cols, uint4* out) {
  pdl_launch_dependents();
  // The norm weight is immutable: read it while the previous kernel drains.
  float wgt[kVecs][8];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int idx = threadIdx.x + k * blockDim.x;
#pragma unroll
    for (int i = 0; i < 8; ++i) wgt[k][i] = idx < vecs_per_row ? load_f(weight, w_dt, idx * 8 + i) : 0.0f;
  }
  pdl_wait();
  __shared__ float scratch[32];
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * vecs_per_row;
  float v[kVecs][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int idx = threadIdx.x + k * blockDim.x;
    if (idx >= vecs_per_row) continue;
    const uint4 xr = x[base + idx];
    const __nv_bfloat162* xh = reinterpret_cast<const __nv_bfloat162*>(&xr);
    uint4 rr;
    if constexpr (kAdd) rr = residual[base + idx];
    __nv_bfloat162* rh = reinterpret_cast<__nv_bfloat162*>(&rr);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = __bfloat1622float2(xh[i]);
      if constexpr (kAdd) {
        const float2 r = __bfloat1622float2(rh[i]);
        rh[i] = __floats2bfloat162_rn(r.x + f.x, r.y + f.y);  // the residual as stored
        f = __bfloat1622float2(rh[i]);
      }
      v[k][2 * i] = f.x;
      v[k][2 * i + 1] = f.y;
      sum_sq += f.x * f.x + f.y * f.y;
    }
    if constexpr (kAdd) residual[base + idx] = rr;
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(cols) + eps);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int idx = threadIdx.x + k * blockDim.x;
    if (idx >= vecs_per_row) continue;
    uint4 o;
    __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      oh[i] = __floats2bfloat162_rn(v[k][2 * i] * inv_rms * wgt[k][2 * i],
                                    v[k][2 * i + 1] * inv_rms * wgt[k][2 * i + 1]);
    out[base + idx] = o;
  }
}

// Launches the bf16 fast path if it applies; false if the caller must use the generic kernel.
template <bool kAdd>
bool launch_norm_bf16(void* residual, const void* x, const void* weight, Dt w_dt, float eps,
                      std::int64_t rows, std::int64_t cols, void* out, const Launch& launch) {
  if (cols % 8 != 0) return false;
  const int vecs = static_cast<int>(cols / 8);
  const int threads = std::min(256, (vecs + 31) / 32 * 32);
  const int per_thread = (vecs + threads - 1) / threads;
  auto* r = static_cast<uint4*>(residual);
  auto* xv = static_cast<const uint4*>(x);
  auto* o = static_cast<uint4*>(out);
  const auto blocks = static_cast<unsigned>(rows);
  switch (per_thread) {
    case 1: launch_kernel(norm_bf16_kernel<1, kAdd>, blocks, threads, 0, launch, r, xv, weight, w_dt, eps, vecs, static_cast<int>(cols), o); break;
    case 2: launch_kernel(norm_bf16_kernel<2, kAdd>, blocks, threads, 0, launch, r, xv, weight, w_dt, eps, vecs, static_cast<int>(cols), o); break;
    case 3:
    case 4: launch_kernel(norm_bf16_kernel<4, kAdd>, blocks, threads, 0, launch, r, xv, weight, w_dt, eps, vecs, static_cast<int>(cols), o); break;
    default: return false;
  }
  SLUICE_CUDA_CHECK_LAUNCH();
  return true;
}

// The same for bf16 in and out with 8 | inter: 8 columns a thread through
// 16-byte loads (the scalar kernel above ran at ~1/3 of HBM speed at 1k rows,
// S11-lead-a); the same f32 math and rounding.
__global__ void silu_mul_bf16x8_kernel(const uint4* gate_up, std::int64_t rows, std::int64_t inter_vecs,
                                       uint4* out) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t n = rows * inter_vecs;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / inter_vecs, c = i - r * inter_vecs;
    const uint4 g4 = gate_up[r * 2 * inter_vecs + c], u4 = gate_up[r * 2 * inter_vecs + inter_vecs + c];
    const auto* g = reinterpret_cast<const __nv_bfloat162*>(&g4);
    const auto* u = reinterpret_cast<const __nv_bfloat162*>(&u4);
    uint4 o4;
    auto* o = reinterpret_cast<__nv_bfloat162*>(&o4);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 gf = __bfloat1622float2(g[j]), uf = __bfloat1622float2(u[j]);
      o[j] = __floats2bfloat162_rn(gf.x / (1.0f + __expf(-gf.x)) * uf.x, gf.y / (1.0f + __expf(-gf.y)) * uf.y);
    }
    out[i] = o4;
  }
}

__global__ void silu_mul_kernel(const void* gate_up, Dt in_dt, std::int64_t rows,
                                std::int64_t inter, void* out, Dt out_dt) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t n = rows * inter;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / inter, c = i - r * inter;
    const float g = load_f(gate_up, in_dt, r * 2 * inter + c);
    const float u = load_f(gate_up, in_dt, r * 2 * inter + inter + c);
    store_f(out, out_dt, i, g / (1.0f + __expf(-g)) * u);
  }
}

__global__ void gather_rows_kernel(const void* x, Dt dt, std::int64_t cols,
                                   const std::int32_t* rows, void* out) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t src = rows[blockIdx.x];
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    store_f(out, dt, blockIdx.x * cols + c, load_f(x, dt, src * cols + c));
}

__global__ void add_bias_kernel(void* out, Dt out_dt, const void* bias, Dt bias_dt,
                                std::int64_t rows, std::int64_t cols) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    store_f(out, out_dt, i, load_f(out, out_dt, i) + load_f(bias, bias_dt, i % cols));
}

// Rotate-half RoPE; blockIdx.x is the row. A thread takes one pair index d
// (d, d + half) and applies it to every head of a share of the row's heads,
// so the angle's sincos is computed once a row and d, not once a head: at
// positions past ~100k sincosf takes its slow exact path, and 40 heads of
// recomputation made this kernel ~8x its bytes' time (S11-lead-a). The angle
// is position * inv_freq in f32, as Hugging Face computes it.
__global__ void rope_kernel(const std::int32_t* positions, void* q, Dt q_dt,
                            std::int32_t num_q_heads, void* k, Dt k_dt,
                            std::int32_t num_kv_heads, std::int32_t head_dim,
                            const float* inv_freq) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t row = blockIdx.x;
  const float pos = static_cast<float>(positions[row]);
  const int half = head_dim / 2;
  const int lanes = min(half, static_cast<int>(blockDim.x));
  const int groups = static_cast<int>(blockDim.x) / lanes;
  const int group = static_cast<int>(threadIdx.x) / lanes;
  if (group >= groups) return;
  const int heads = num_q_heads + num_kv_heads;
  for (int d = static_cast<int>(threadIdx.x) % lanes; d < half; d += lanes) {
    float s, c;
    sincosf(pos * inv_freq[d], &s, &c);
    for (int head = group; head < heads; head += groups) {
      const bool is_q = head < num_q_heads;
      void* base = is_q ? q : k;
      const Dt dt = is_q ? q_dt : k_dt;
      const int h = is_q ? head : head - num_q_heads;
      const int num_heads = is_q ? num_q_heads : num_kv_heads;
      const std::int64_t off = (row * num_heads + h) * head_dim;
      const float x1 = load_f(base, dt, off + d), x2 = load_f(base, dt, off + d + half);
      store_f(base, dt, off + d, x1 * c - x2 * s);
      store_f(base, dt, off + d + half, x2 * c + x1 * s);
    }
  }
}

// RoPE on q and k and the KV page write in one kernel (decode steps under
// CUDA graphs; ~3-4 us a layer each at batch 1, serial): one thread per pair
// (d, d + half) of one head of one row, over the q heads, the k heads and
// the v heads. A k pair is rotated, written back and written to its page; a
// v pair goes to its page unchanged. Same f32 angle and rounding as
// rope_kernel and kv_write_kernel, so the page holds the same bits.
__global__ void rope_kv_write_kernel(RopeKvWriteArgs a, const std::int32_t* positions,
                                     const std::int32_t* row_sequence, const std::int32_t* seq_block_offset,
                                     const std::int32_t* block_tables) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t row = blockIdx.x;
  const int pos = positions[row];
  const int half = a.head_dim / 2;
  const int i = blockIdx.y * blockDim.x + threadIdx.x;
  if (i >= (a.num_q_heads + 2 * a.num_kv_heads) * half) return;
  const int head = i / half, d = i - head * half;
  const std::int64_t kv_width = static_cast<std::int64_t>(a.num_kv_heads) * a.head_dim;
  if (head < a.num_q_heads + a.num_kv_heads) {
    const bool is_q = head < a.num_q_heads;
    const int h = is_q ? head : head - a.num_q_heads;
    void* base = is_q ? a.q : a.k;
    const Dt dt = is_q ? a.q_dt : Dt::bf16;
    const std::int64_t off = row * (is_q ? static_cast<std::int64_t>(a.num_q_heads) * a.head_dim : kv_width) +
                             static_cast<std::int64_t>(h) * a.head_dim;
    float s, c;
    sincosf(static_cast<float>(pos) * a.inv_freq[d], &s, &c);
    const float x1 = load_f(base, dt, off + d), x2 = load_f(base, dt, off + d + half);
    const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
    store_f(base, dt, off + d, y1);
    store_f(base, dt, off + d + half, y2);
    if (is_q) return;
    const int block = block_tables[seq_block_offset[row_sequence[row]] + pos / a.block_size];
    const std::int64_t slot = static_cast<std::int64_t>(block) * a.block_size + pos % a.block_size;
    auto* cache = static_cast<__nv_bfloat16*>(a.k_cache) + slot * kv_width + static_cast<std::int64_t>(h) * a.head_dim;
    cache[d] = __float2bfloat16(y1);
    cache[d + half] = __float2bfloat16(y2);
    return;
  }
  const int h = head - a.num_q_heads - a.num_kv_heads;
  const int block = block_tables[seq_block_offset[row_sequence[row]] + pos / a.block_size];
  const std::int64_t slot = static_cast<std::int64_t>(block) * a.block_size + pos % a.block_size;
  const auto* src = static_cast<const __nv_bfloat16*>(a.v) + row * kv_width + static_cast<std::int64_t>(h) * a.head_dim;
  auto* cache = static_cast<__nv_bfloat16*>(a.v_cache) + slot * kv_width + static_cast<std::int64_t>(h) * a.head_dim;
  cache[d] = src[d];
  cache[d + half] = src[d + half];
}

// One block per row: copies the row's K and V (bf16, 16 bytes a thread) into
// the page that holds its position.
__global__ void kv_write_kernel(const std::int32_t* positions, const std::int32_t* row_sequence,
                                const std::int32_t* seq_block_offset,
                                const std::int32_t* block_tables, const uint4* k, const uint4* v,
                                uint4* k_cache, uint4* v_cache, std::int32_t row_vecs,
                                std::int32_t block_size) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t row = blockIdx.x;
  const int pos = positions[row];
  const int block = block_tables[seq_block_offset[row_sequence[row]] + pos / block_size];
  const std::int64_t slot = static_cast<std::int64_t>(block) * block_size + pos % block_size;
  for (int i = threadIdx.x; i < row_vecs; i += blockDim.x) {
    k_cache[slot * row_vecs + i] = k[row * row_vecs + i];
    v_cache[slot * row_vecs + i] = v[row * row_vecs + i];
  }
}

__global__ void random_fill_kernel(void* out, Dt dt, std::int64_t n, std::uint64_t seed,
                                   float scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint64_t x = seed ^ (static_cast<std::uint64_t>(i) * 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
    store_f(out, dt, i, (2.0f * u - 1.0f) * scale);
  }
}

__global__ void to_f32_kernel(const void* x, Dt dt, std::int64_t n, float* out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = load_f(x, dt, i);
}

int grid_for(std::int64_t n, int threads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(blocks < 132 * 32 ? (blocks > 0 ? blocks : 1) : 132 * 32);
}

}  // namespace

void launch_embedding(const StepDeviceView& step, const void* table, Dt table_dt,
                      std::int64_t hidden, void* out, Dt out_dt, const Launch& launch) {
  if (step.num_rows == 0) return;
  launch_kernel(embedding_kernel, step.num_rows, kRowThreads, 0, launch, step.token_ids, table,
                table_dt, hidden, out, out_dt);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_rms_norm(const void* x, Dt x_dt, const void* weight, Dt w_dt, float eps,
                     std::int64_t rows, std::int64_t cols, void* out, Dt out_dt,
                     const Launch& launch) {
  if (rows == 0) return;
  if (x_dt == Dt::bf16 && out_dt == Dt::bf16 &&
      launch_norm_bf16<false>(nullptr, x, weight, w_dt, eps, rows, cols, out, launch))
    return;
  launch_kernel(rms_norm_kernel, static_cast<unsigned>(rows), kRowThreads, 0, launch, x, x_dt,
                weight, w_dt, eps, cols, out, out_dt);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_add_rms_norm(void* residual, Dt r_dt, const void* x, Dt x_dt, const void* weight,
                         Dt w_dt, float eps, std::int64_t rows, std::int64_t cols, void* out,
                         Dt out_dt, const Launch& launch) {
  if (rows == 0) return;
  if (r_dt == Dt::bf16 && x_dt == Dt::bf16 && out_dt == Dt::bf16 && residual != out &&
      launch_norm_bf16<true>(residual, x, weight, w_dt, eps, rows, cols, out, launch))
    return;
  launch_kernel(add_rms_norm_kernel, static_cast<unsigned>(rows), kRowThreads, 0, launch,
                residual, r_dt, x, x_dt, weight, w_dt, eps, cols, out, out_dt);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_silu_mul(const void* gate_up, Dt in_dt, std::int64_t rows, std::int64_t inter,
                     void* out, Dt out_dt, const Launch& launch) {
  if (rows * inter == 0) return;
  const bool aligned = reinterpret_cast<std::uintptr_t>(gate_up) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  if (in_dt == Dt::bf16 && out_dt == Dt::bf16 && inter % 8 == 0 && aligned) {
    launch_kernel(silu_mul_bf16x8_kernel, grid_for(rows * inter / 8, 256), 256, 0, launch,
                  static_cast<const uint4*>(gate_up), rows, inter / 8, static_cast<uint4*>(out));
    SLUICE_CUDA_CHECK_LAUNCH();
    return;
  }
  launch_kernel(silu_mul_kernel, grid_for(rows * inter, 256), 256, 0, launch, gate_up, in_dt,
                rows, inter, out, out_dt);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(const void* x, Dt dt, std::int64_t cols, const std::int32_t* rows,
                        std::int32_t num_rows, void* out, const Launch& launch) {
  if (num_rows == 0) return;
  launch_kernel(gather_rows_kernel, num_rows, kRowThreads, 0, launch, x, dt, cols, rows, out);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_add_bias(void* out, Dt out_dt, const void* bias, Dt bias_dt, std::int64_t rows,
                     std::int64_t cols, const Launch& launch) {
  if (rows * cols == 0) return;
  launch_kernel(add_bias_kernel, grid_for(rows * cols, 256), 256, 0, launch, out, out_dt, bias,
                bias_dt, rows, cols);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_rope(const StepDeviceView& step, void* q, Dt q_dt, std::int32_t num_q_heads,
                 void* k, Dt k_dt, std::int32_t num_kv_heads, std::int32_t head_dim,
                 const float* inv_freq, const Launch& launch) {
  if (step.num_rows == 0) return;
  constexpr int kThreads = 256;
  launch_kernel(rope_kernel, dim3(step.num_rows), kThreads, 0, launch, step.positions, q, q_dt, num_q_heads, k,
                k_dt, num_kv_heads, head_dim, inv_freq);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_rope_kv_write(const StepDeviceView& step, const RopeKvWriteArgs& args, const Launch& launch) {
  if (step.num_rows == 0) return;
  constexpr int kThreads = 128;
  const int pairs = (args.num_q_heads + 2 * args.num_kv_heads) * (args.head_dim / 2);
  const dim3 grid(step.num_rows, (pairs + kThreads - 1) / kThreads);
  launch_kernel(rope_kv_write_kernel, grid, kThreads, 0, launch, args, step.positions, step.row_sequence,
                step.seq_block_offset, step.block_tables);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_kv_write(const StepDeviceView& step, const void* k, const void* v, void* k_cache,
                     void* v_cache, std::int32_t num_kv_heads, std::int32_t head_dim,
                     std::int32_t block_size_tokens, const Launch& launch) {
  if (step.num_rows == 0) return;
  const std::int32_t row_vecs = num_kv_heads * head_dim / 8;  // 8 bf16 per uint4
  launch_kernel(kv_write_kernel, step.num_rows, 128, 0, launch,
      step.positions, step.row_sequence, step.seq_block_offset, step.block_tables,
      static_cast<const uint4*>(k), static_cast<const uint4*>(v), static_cast<uint4*>(k_cache),
      static_cast<uint4*>(v_cache), row_vecs, block_size_tokens);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_random_fill(void* out, Dt dt, std::int64_t n, std::uint64_t seed, float scale,
                        cudaStream_t stream) {
  if (n == 0) return;
  random_fill_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, dt, n, seed, scale);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_to_f32(const void* x, Dt dt, std::int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  to_f32_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, dt, n, out);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
