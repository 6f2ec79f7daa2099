// MLA's element-wise kernels: partial (and interleaved) RoPE, and the latent
// cache's page writes and context gathers. Memory-bound and small next to the
// attention; written for clarity.
#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/mla_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 128;
// Heads a rope_partial block rotates: their rotary dims are staged in shared
// memory so an interleaved head can be read whole before it is overwritten.
constexpr int kRopeHeadsPerBlock = 16;

// One block per (row, group of kRopeHeadsPerBlock heads).
__global__ void __launch_bounds__(kThreads) rope_partial_kernel(StepDeviceView step, RopePartialArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float staged[kRopeHeadsPerBlock * kRopePartialMaxDim];
  const std::int64_t row = blockIdx.x;
  const int first_head = blockIdx.y * kRopeHeadsPerBlock;
  const int heads = min(kRopeHeadsPerBlock, a.num_heads - first_head);
  const int dim = a.rotary_dim, half = dim / 2;
  const std::int64_t row_base = row * a.num_heads * a.head_stride + a.rotary_offset;
  for (int i = threadIdx.x; i < heads * dim; i += kThreads) {
    const int h = i / dim, d = i - h * dim;
    staged[i] = load_f(a.x, a.dt, row_base + static_cast<std::int64_t>(first_head + h) * a.head_stride + d);
  }
  __syncthreads();
  const float position = static_cast<float>(step.positions[row]);
  for (int i = threadIdx.x; i < heads * half; i += kThreads) {
    const int h = i / half, d = i - h * half;
    const float* v = staged + h * dim;
    const float x1 = a.interleaved ? v[2 * d] : v[d];
    const float x2 = a.interleaved ? v[2 * d + 1] : v[d + half];
    float s, c;
    sincosf(position * a.inv_freq[d], &s, &c);  // the f32 angle, as the CPU reference
    c *= a.cos_sin_scale;
    s *= a.cos_sin_scale;
    const std::int64_t out = row_base + static_cast<std::int64_t>(first_head + h) * a.head_stride;
    store_f(a.x, a.dt, out + d, x1 * c - x2 * s);
    store_f(a.x, a.dt, out + d + half, x2 * c + x1 * s);
  }
}

// The slot of position `pos` of sequence `seq`, in elements of the cache.
__device__ __forceinline__ std::int64_t latent_slot(const StepDeviceView& step, int seq, int pos,
                                                    const LatentCache& cache) {
  const std::int32_t* table = step.block_tables + step.seq_block_offset[seq];
  const std::int64_t slot = static_cast<std::int64_t>(table[pos / cache.block_size]) * cache.block_size +
                            pos % cache.block_size;
  return slot * cache.width;
}

// One block a row.
__global__ void __launch_bounds__(kThreads) latent_write_kernel(StepDeviceView step, const __nv_bfloat16* latent,
                                                                const __nv_bfloat16* k_rope, LatentCache cache) {
  pdl_launch_dependents();
  pdl_wait();
  const int row = blockIdx.x;
  const int seq = step.row_sequence[row];
  const int pos = step.seq_num_computed[seq] + row - step.seq_row_begin[seq];
  auto* dst = static_cast<__nv_bfloat16*>(cache.data) + latent_slot(step, seq, pos, cache);
  const int rank = cache.kv_lora_rank, rope = cache.width - rank;
  for (int d = threadIdx.x; d < cache.width; d += kThreads)
    dst[d] = d < rank ? latent[static_cast<std::int64_t>(row) * rank + d]
                      : k_rope[static_cast<std::int64_t>(row) * rope + d - rank];
}

// One block a position.
__global__ void __launch_bounds__(kThreads) latent_gather_kernel(StepDeviceView step, int seq, LatentCache cache,
                                                                 __nv_bfloat16* c, __nv_bfloat16* k_rope) {
  pdl_launch_dependents();
  pdl_wait();
  const int pos = blockIdx.x;
  const auto* src = static_cast<const __nv_bfloat16*>(cache.data) + latent_slot(step, seq, pos, cache);
  const int rank = cache.kv_lora_rank, rope = cache.width - rank;
  for (int d = threadIdx.x; d < cache.width; d += kThreads) {
    if (d < rank)
      c[static_cast<std::int64_t>(pos) * rank + d] = src[d];
    else
      k_rope[static_cast<std::int64_t>(pos) * rope + d - rank] = src[d];
  }
}

// k[p, h, :] = [kv[p, h, :nope] | k_rope[p, :]]: the decompressed keys as
// whole QK heads (cuDNN reads a head's QK dims contiguous). 16-byte vectors.
__global__ void __launch_bounds__(kThreads) mla_concat_k_kernel(const __nv_bfloat16* kv, const __nv_bfloat16* k_rope,
                                                                __nv_bfloat16* k, int heads, int nope, int rope,
                                                                int kv_width) {
  pdl_launch_dependents();
  pdl_wait();
  const std::int64_t pos = blockIdx.x;
  const int qk = nope + rope, vectors = qk / 8;
  for (int i = threadIdx.x; i < heads * vectors; i += kThreads) {
    const int h = i / vectors, d = (i % vectors) * 8;
    const __nv_bfloat16* src = d < nope ? kv + (pos * heads + h) * kv_width + d : k_rope + pos * rope + (d - nope);
    *reinterpret_cast<uint4*>(k + (pos * heads + h) * qk + d) = *reinterpret_cast<const uint4*>(src);
  }
}

}  // namespace

void launch_mla_concat_k(const void* kv, const void* k_rope, void* k, std::int32_t num_positions, std::int32_t heads,
                         std::int32_t nope, std::int32_t rope, std::int32_t kv_width, const Launch& launch) {
  SLUICE_CHECK(nope % 8 == 0 && rope % 8 == 0 && kv_width % 8 == 0);
  if (num_positions == 0 || heads == 0) return;
  launch_kernel(mla_concat_k_kernel, dim3(num_positions), dim3(kThreads), 0, launch,
                static_cast<const __nv_bfloat16*>(kv), static_cast<const __nv_bfloat16*>(k_rope),
                static_cast<__nv_bfloat16*>(k), static_cast<int>(heads), static_cast<int>(nope),
                static_cast<int>(rope), static_cast<int>(kv_width));
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_rope_partial(const StepDeviceView& step, const RopePartialArgs& args, const Launch& launch) {
  SLUICE_CHECK(args.rotary_dim > 0 && args.rotary_dim % 2 == 0 && args.rotary_dim <= kRopePartialMaxDim);
  if (step.num_rows == 0 || args.num_heads == 0) return;
  const dim3 grid(step.num_rows, (args.num_heads + kRopeHeadsPerBlock - 1) / kRopeHeadsPerBlock);
  launch_kernel(rope_partial_kernel, grid, dim3(kThreads), 0, launch, step, args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_latent_write(const StepDeviceView& step, const void* latent, const void* k_rope, const LatentCache& cache,
                         const Launch& launch) {
  if (step.num_rows == 0) return;
  launch_kernel(latent_write_kernel, dim3(step.num_rows), dim3(kThreads), 0, launch, step,
                static_cast<const __nv_bfloat16*>(latent), static_cast<const __nv_bfloat16*>(k_rope), cache);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_latent_gather(const StepDeviceView& step, std::int32_t seq, std::int32_t num_positions,
                          const LatentCache& cache, void* c, void* k_rope, const Launch& launch) {
  if (num_positions == 0) return;
  launch_kernel(latent_gather_kernel, dim3(num_positions), dim3(kThreads), 0, launch, step, seq, cache,
                static_cast<__nv_bfloat16*>(c), static_cast<__nv_bfloat16*>(k_rope));
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
