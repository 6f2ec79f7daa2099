// Greedy sampling on the device: per row of logits, the argmax (lowest id on
// ties, as std::max_element) and the log-sum-exp, so the host reads back 12
// bytes a row instead of the vocabulary.
#include <cuda_bf16.h>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ void better(float& v, int& i, float v_o, int i_o) {
  if (v_o > v || (v_o == v && i_o < i)) {
    v = v_o;
    i = i_o;
  }
}

__global__ void argmax_lse_kernel(const void* logits, Dt dt, std::int64_t vocab,
                                  std::int32_t* out_token, float* out_stats) {
  __shared__ float s_val[32];
  __shared__ int s_idx[32];
  __shared__ float s_sum[32];
  const std::int64_t base = blockIdx.x * vocab;
  float best = -INFINITY;
  int best_i = 0x7fffffff;
  for (std::int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
    better(best, best_i, load_f(logits, dt, base + c), static_cast<int>(c));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    better(best, best_i, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, best_i, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    s_val[warp] = best;
    s_idx[warp] = best_i;
  }
  __syncthreads();
  best = s_val[lane];
  best_i = s_idx[lane];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    better(best, best_i, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, best_i, o));
  float sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
    sum += __expf(load_f(logits, dt, base + c) - best);
  sum = block_sum(sum, s_sum);
  if (threadIdx.x == 0) {
    out_token[blockIdx.x] = best_i;
    out_stats[2 * blockIdx.x] = best;
    out_stats[2 * blockIdx.x + 1] = best + logf(sum);
  }
}

}  // namespace

void launch_argmax_lse(const void* logits, Dt dt, std::int32_t rows, std::int64_t vocab,
                       std::int32_t* out_token, float* out_stats, cudaStream_t stream) {
  if (rows == 0) return;
  argmax_lse_kernel<<<rows, kThreads, 0, stream>>>(logits, dt, vocab, out_token, out_stats);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
