// mHC on the device (deepseek_v4_kernels.h), one block per row.
//
// hc_pre: the flattened streams' RMS (a block sum), the (2 + hc) * hc mixes
// fn . (streams * inv_rms) (each thread's partial dot products, then one
// block reduction per mix), then thread 0 forms pre / post / comb in double as
// the reference does (sigmoids, a row softmax plus eps, the Sinkhorn rounds:
// a 4 x 4 matrix, negligible), and every thread collapses its channels.
// hc_head is the same with hc mixes and the collapse only. hc_post is
// elementwise: a thread per (row, channel), all hc streams at once.
#include <cuda_runtime.h>

#include <cmath>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kHc = kV4MaxHcMult;
constexpr int kMaxMixes = (2 + kHc) * kHc;  // 24
constexpr int kThreads = 256;

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

__global__ void __launch_bounds__(kThreads) v4_hc_pre_kernel(V4HcPreArgs a) {
  __shared__ float scratch[32];
  __shared__ float partial[kMaxMixes][kThreads / 32];
  __shared__ float mixes[kMaxMixes];
  __shared__ float pre[kHc];
  const int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hc = a.hc, width = a.hc * a.hidden;
  const int num_mixes = a.head ? hc : (2 + hc) * hc;
  const float* streams = a.streams + static_cast<std::int64_t>(row) * width;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < width; i += kThreads) sum_sq = fmaf(streams[i], streams[i], sum_sq);
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(width) + a.norm_eps);
  float dots[kMaxMixes];
#pragma unroll
  for (int m = 0; m < kMaxMixes; ++m) dots[m] = 0.0f;
  for (int i = threadIdx.x; i < width; i += kThreads) {
    const float x = streams[i] * inv_rms;
#pragma unroll
    for (int m = 0; m < kMaxMixes; ++m)
      if (m < num_mixes) dots[m] = fmaf(a.w.fn[static_cast<std::int64_t>(m) * width + i], x, dots[m]);
  }
#pragma unroll
  for (int m = 0; m < kMaxMixes; ++m) {
    const float v = warp_sum(dots[m]);
    if (lane == 0 && m < num_mixes) partial[m][warp] = v;
  }
  __syncthreads();
  if (threadIdx.x < num_mixes) {
    float v = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) v += partial[threadIdx.x][w];
    mixes[threadIdx.x] = v;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const std::int64_t r = row;
    for (int j = 0; j < hc; ++j) {
      pre[j] = static_cast<float>(sigmoid_d(static_cast<double>(mixes[j]) * a.w.scale[0] + a.w.base[j]) + a.hc_eps);
      if (!a.head)
        a.post[r * hc + j] =
            static_cast<float>(2.0 * sigmoid_d(static_cast<double>(mixes[hc + j]) * a.w.scale[1] + a.w.base[hc + j]));
    }
    if (!a.head) {
      double comb[kHc * kHc];
      for (int j = 0; j < hc; ++j) {
        double top = -INFINITY;
        for (int k = 0; k < hc; ++k) {
          comb[j * hc + k] =
              static_cast<double>(mixes[2 * hc + j * hc + k]) * a.w.scale[2] + a.w.base[2 * hc + j * hc + k];
          top = fmax(top, comb[j * hc + k]);
        }
        double sum = 0.0;
        for (int k = 0; k < hc; ++k) sum += (comb[j * hc + k] = exp(comb[j * hc + k] - top));
        for (int k = 0; k < hc; ++k) comb[j * hc + k] = comb[j * hc + k] / sum + a.hc_eps;
      }
      for (int iter = 0; iter < a.sinkhorn_iters; ++iter) {
        if (iter > 0) {  // rows, then columns; the first round is columns only
          for (int j = 0; j < hc; ++j) {
            double sum = 0.0;
            for (int k = 0; k < hc; ++k) sum += comb[j * hc + k];
            for (int k = 0; k < hc; ++k) comb[j * hc + k] /= sum + a.hc_eps;
          }
        }
        for (int k = 0; k < hc; ++k) {
          double sum = 0.0;
          for (int j = 0; j < hc; ++j) sum += comb[j * hc + k];
          for (int j = 0; j < hc; ++j) comb[j * hc + k] /= sum + a.hc_eps;
        }
      }
      for (int i = 0; i < hc * hc; ++i) a.comb[r * hc * hc + i] = static_cast<float>(comb[i]);
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < a.hidden; d += kThreads) {
    float sum = 0.0f;
    for (int j = 0; j < hc; ++j) sum = fmaf(pre[j], streams[static_cast<std::int64_t>(j) * a.hidden + d], sum);
    store_f(a.collapsed, a.out_dt, static_cast<std::int64_t>(row) * a.hidden + d, sum);
  }
}

__global__ void v4_hc_post_kernel(V4HcPostArgs a) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::int64_t>(a.rows) * a.hidden) return;
  const std::int64_t row = i / a.hidden, d = i % a.hidden;
  const int hc = a.hc;
  float* streams = a.streams + row * hc * a.hidden;
  float in[kHc];
#pragma unroll
  for (int j = 0; j < kHc; ++j) in[j] = j < hc ? streams[j * a.hidden + d] : 0.0f;
  const float y = load_f(a.y, a.y_dt, i);
  const float* comb = a.comb + row * hc * hc;
#pragma unroll
  for (int k = 0; k < kHc; ++k) {
    if (k >= hc) break;
    float sum = a.post[row * hc + k] * y;
#pragma unroll
    for (int j = 0; j < kHc; ++j)
      if (j < hc) sum = fmaf(comb[j * hc + k], in[j], sum);
    streams[k * a.hidden + d] = sum;
  }
}

}  // namespace

void launch_v4_hc_pre(const V4HcPreArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.hc > 0 && args.hc <= kHc && args.hidden > 0);
  SLUICE_CHECK(args.streams != nullptr && args.w.fn != nullptr && args.w.base != nullptr && args.w.scale != nullptr &&
               args.collapsed != nullptr);
  SLUICE_CHECK(args.head || (args.post != nullptr && args.comb != nullptr && args.sinkhorn_iters >= 1));
  if (args.rows == 0) return;
  v4_hc_pre_kernel<<<static_cast<unsigned>(args.rows), kThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_hc_post(const V4HcPostArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.hc > 0 && args.hc <= kHc && args.hidden > 0);
  SLUICE_CHECK(args.streams != nullptr && args.y != nullptr && args.post != nullptr && args.comb != nullptr);
  if (args.rows == 0) return;
  const std::int64_t n = static_cast<std::int64_t>(args.rows) * args.hidden;
  v4_hc_post_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
