// mHC on the device (deepseek_v4_kernels.h), one block per row (hc_pre with
// a workspace: its dot products split over the width first, see below).
//
// hc_pre: the flattened streams' RMS (a block sum), the (2 + hc) * hc mixes
// fn . (streams * inv_rms) (each thread's partial dot products, four channels
// at a time, then one block reduction per mix), then pre / post / comb in
// double as the reference forms them (sigmoids, a row softmax plus eps, the
// Sinkhorn rounds), a thread an entry of the hc x hc matrix, and every thread
// collapses its channels. At decode a row is a whole call, so its latency is
// the call's: the session-11 form (256 threads, scalar loads, one thread for
// the 20 Sinkhorn rounds in double) took 192 us a call at hc 4 x 4096.
// hc_head is the same with hc mixes and the collapse only. hc_post is
// elementwise: a thread per (row, channel), all hc streams at once.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kHc = kV4MaxHcMult;
constexpr int kMaxMixes = (2 + kHc) * kHc;  // 24
constexpr int kPreThreads = 512;   // hc_pre: a row's mix dot products are its whole cost at decode
// The split form: threads a block, channels a slice (a float4 a thread), rows a
// block, and the values a (row, slice) leaves: 24 mixes and the sum of squares.
constexpr int kSplitThreads = 128;
constexpr int kSliceWidth = kSplitThreads * 4;
constexpr int kSplitRows = 2;
// Prefill's calls (more than kPrefillRows rows): 16 rows a partials block, fn
// read once for them, and 128 threads a row to finish, so more rows at once
// hide the one-warp Sinkhorn rounds; decode's few rows keep 2 and kPreThreads.
constexpr int kPrefillRows = 1024;
constexpr int kPrefillSplitRows = 16;
constexpr int kPrefillFinishThreads = 128;
constexpr int kSplitValues = kMaxMixes + 1;

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

// Each thread's share of the row's sum of squares, then of the mixes' dot
// products fn[m] . (streams * inv_rms): four channels at a time (kVec) when
// the row and fn are 16-byte aligned, else one.
template <bool kVec>
__device__ __forceinline__ float row_sum_sq(const float* streams, int width) {
  float sum_sq = 0.0f;
  if constexpr (kVec) {
    const float4* s4 = reinterpret_cast<const float4*>(streams);
    for (int i = threadIdx.x; i < width / 4; i += kPreThreads) {
      const float4 v = s4[i];
      sum_sq = fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, fmaf(v.w, v.w, sum_sq))));
    }
  } else {
    for (int i = threadIdx.x; i < width; i += kPreThreads) sum_sq = fmaf(streams[i], streams[i], sum_sq);
  }
  return sum_sq;
}

template <bool kVec>
__device__ __forceinline__ void mix_dots(const float* streams, const float* fn, int width, int num_mixes,
                                         float inv_rms, float (&dots)[kMaxMixes]) {
  if constexpr (kVec) {
    const float4* s4 = reinterpret_cast<const float4*>(streams);
    const float4* f4 = reinterpret_cast<const float4*>(fn);
    const int width4 = width / 4;
    for (int i = threadIdx.x; i < width4; i += kPreThreads) {
      float4 x = s4[i];
      x.x *= inv_rms;
      x.y *= inv_rms;
      x.z *= inv_rms;
      x.w *= inv_rms;
#pragma unroll
      for (int m = 0; m < kMaxMixes; ++m)
        if (m < num_mixes) {
          const float4 f = f4[static_cast<std::int64_t>(m) * width4 + i];
          dots[m] = fmaf(f.x, x.x, fmaf(f.y, x.y, fmaf(f.z, x.z, fmaf(f.w, x.w, dots[m]))));
        }
    }
  } else {
    for (int i = threadIdx.x; i < width; i += kPreThreads) {
      const float x = streams[i] * inv_rms;
#pragma unroll
      for (int m = 0; m < kMaxMixes; ++m)
        if (m < num_mixes) dots[m] = fmaf(fn[static_cast<std::int64_t>(m) * width + i], x, dots[m]);
    }
  }
}

// pre / post / comb from a row's mixes (in shared memory), then the collapse:
// the reference's arithmetic, shared by both forms of hc_pre. Every thread of
// the block (any multiple of 32 threads) calls it; pre and comb are the block's shared arrays.
__device__ __forceinline__ void hc_pre_finish(const V4HcPreArgs& a, int row, const float* streams,
                                              const float* mixes, float* pre, double* comb) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hc = a.hc;
  const std::int64_t r = row;
  if (threadIdx.x < hc) {
    const int j = threadIdx.x;
    pre[j] = static_cast<float>(sigmoid_d(static_cast<double>(mixes[j]) * a.w.scale[0] + a.w.base[j]) + a.hc_eps);
    if (!a.head)
      a.post[r * hc + j] =
          static_cast<float>(2.0 * sigmoid_d(static_cast<double>(mixes[hc + j]) * a.w.scale[1] + a.w.base[hc + j]));
  }
  if (!a.head && warp == 0) {
    // Lanes t < hc * hc own comb[j][k], t = j * hc + k; the others only meet the warp's syncs.
    const int t = lane, j = t / hc, k = t % hc;
    const bool mine = t < hc * hc;
    double c = 0.0;
    if (mine) c = static_cast<double>(mixes[2 * hc + t]) * a.w.scale[2] + a.w.base[2 * hc + t];
    // Row softmax plus eps.
    if (mine) comb[t] = c;
    __syncwarp();
    double top = -INFINITY;
    if (mine)
      for (int q = 0; q < hc; ++q) top = fmax(top, comb[j * hc + q]);
    const double e = mine ? exp(c - top) : 0.0;
    __syncwarp();
    if (mine) comb[t] = e;
    __syncwarp();
    double sum = 0.0;
    if (mine)
      for (int q = 0; q < hc; ++q) sum += comb[j * hc + q];
    if (mine) c = e / sum + a.hc_eps;
    for (int iter = 0; iter < a.sinkhorn_iters; ++iter) {
      if (iter > 0) {  // rows, then columns; the first round is columns only
        __syncwarp();
        if (mine) comb[t] = c;
        __syncwarp();
        sum = 0.0;
        if (mine)
          for (int q = 0; q < hc; ++q) sum += comb[j * hc + q];
        if (mine) c /= sum + a.hc_eps;
      }
      __syncwarp();
      if (mine) comb[t] = c;
      __syncwarp();
      sum = 0.0;
      if (mine)
        for (int q = 0; q < hc; ++q) sum += comb[q * hc + k];
      if (mine) c /= sum + a.hc_eps;
    }
    if (mine) a.comb[r * hc * hc + t] = static_cast<float>(c);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < a.hidden; d += blockDim.x) {
    float sum = 0.0f;
    for (int j = 0; j < hc; ++j) sum = fmaf(pre[j], streams[static_cast<std::int64_t>(j) * a.hidden + d], sum);
    store_f(a.collapsed, a.out_dt, static_cast<std::int64_t>(row) * a.hidden + d, sum);
  }
}

// One block a row. The reference's pre / post / comb arithmetic (double,
// the same sums in the same order) runs on hc * hc threads at once: a
// thread an entry of comb, the row and column sums read from shared memory.
template <bool kVec>
__global__ void __launch_bounds__(kPreThreads) v4_hc_pre_kernel(V4HcPreArgs a) {
  __shared__ float scratch[32];
  __shared__ float partial[kMaxMixes][kPreThreads / 32];
  __shared__ float mixes[kMaxMixes];
  __shared__ float pre[kHc];
  __shared__ double comb[kHc * kHc];
  const int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hc = a.hc, width = a.hc * a.hidden;
  const int num_mixes = a.head ? hc : (2 + hc) * hc;
  const float* streams = a.streams + static_cast<std::int64_t>(row) * width;
  const float inv_rms =
      rsqrtf(block_sum(row_sum_sq<kVec>(streams, width), scratch) / static_cast<float>(width) + a.norm_eps);
  float dots[kMaxMixes];
#pragma unroll
  for (int m = 0; m < kMaxMixes; ++m) dots[m] = 0.0f;
  mix_dots<kVec>(streams, a.w.fn, width, num_mixes, inv_rms, dots);
#pragma unroll
  for (int m = 0; m < kMaxMixes; ++m) {
    const float v = warp_sum(dots[m]);
    if (lane == 0 && m < num_mixes) partial[m][warp] = v;
  }
  __syncthreads();
  if (threadIdx.x < num_mixes) {
    float v = 0.0f;
    for (int w = 0; w < kPreThreads / 32; ++w) v += partial[threadIdx.x][w];
    mixes[threadIdx.x] = v;
  }
  __syncthreads();
  hc_pre_finish(a, row, streams, mixes, pre, comb);
}

// The split form (a workspace given): the mixes' dot products spread over
// every SM instead of one block a row (whose latency was the call's: 82 us at
// hc 4 x 4096, batch 1 and 64 alike). Block (slice, rows): a 512-channel slice
// of the flattened streams for kRows rows, a float4 a thread. A thread holds
// its channels of the 24 fn rows in registers and runs the block's rows past
// them two at a time, so fn is read once a block; each (row, slice) writes its
// 24 partial dots of fn . streams and its sum of squares. Prefill takes 16
// rows a block: at 2, each block re-read its 48 KB of fn from L2 for 4 KB of
// streams (0.75 ms a call at 8,192 rows, S21-4). Then a block a row sums the
// slices in order, scales by the inverse RMS (the reference scales the
// streams before the dot; the same value up to rounding), and finishes as above.
template <int kRows>
__global__ void __launch_bounds__(kSplitThreads) v4_hc_pre_partials_kernel(V4HcPreArgs a) {
  static_assert(kRows % kSplitRows == 0, "rows in pairs");
  constexpr int kPairValues = kSplitRows * kSplitValues;  // 50
  __shared__ float warp_part[kSplitThreads / 32][kRows][kSplitValues];
  // A warp's lanes' values of a row pair, a value a row (33 wide: a lane's
  // column reads fall in distinct banks).
  __shared__ float lane_part[kSplitThreads / 32][kPairValues][33];
  const int slice = blockIdx.x, row_begin = blockIdx.y * kRows;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int width4 = a.hc * a.hidden / 4, num_slices = width4 * 4 / kSliceWidth;
  const int num_mixes = a.head ? a.hc : (2 + a.hc) * a.hc;
  const int c4 = slice * kSplitThreads + threadIdx.x;
  const float4* s4 = reinterpret_cast<const float4*>(a.streams);
  const float4* f4 = reinterpret_cast<const float4*>(a.w.fn);
  float4 f[kMaxMixes];
#pragma unroll
  for (int m = 0; m < kMaxMixes; ++m)
    f[m] = m < num_mixes ? f4[static_cast<std::int64_t>(m) * width4 + c4] : make_float4(0.f, 0.f, 0.f, 0.f);
  for (int row0 = row_begin; row0 < row_begin + kRows; row0 += kSplitRows) {
    float4 x[kSplitRows];
    float dots[kSplitRows][kSplitValues];
#pragma unroll
    for (int r = 0; r < kSplitRows; ++r) {
      x[r] = row0 + r < a.rows ? s4[static_cast<std::int64_t>(row0 + r) * width4 + c4] : make_float4(0.f, 0.f, 0.f, 0.f);
      dots[r][kMaxMixes] = fmaf(x[r].x, x[r].x, fmaf(x[r].y, x[r].y, fmaf(x[r].z, x[r].z, x[r].w * x[r].w)));
    }
#pragma unroll
    for (int m = 0; m < kMaxMixes; ++m)
#pragma unroll
      for (int r = 0; r < kSplitRows; ++r)
        dots[r][m] = fmaf(f[m].x, x[r].x, fmaf(f[m].y, x[r].y, fmaf(f[m].z, x[r].z, f[m].w * x[r].w)));
    // The warp's sums of its 50 values: through shared memory, a lane a
    // value (50 x 5 shuffles a pair was the kernel's bound: SHFL issues at
    // one warp a cycle a multiprocessor).
#pragma unroll
    for (int r = 0; r < kSplitRows; ++r)
#pragma unroll
      for (int m = 0; m < kSplitValues; ++m) lane_part[warp][r * kSplitValues + m][lane] = dots[r][m];
    __syncwarp();
    for (int v = lane; v < kPairValues; v += 32) {
      float sum = 0.0f;
#pragma unroll 8
      for (int l = 0; l < 32; ++l) sum += lane_part[warp][v][l];
      warp_part[warp][row0 - row_begin + v / kSplitValues][v % kSplitValues] = sum;
    }
    __syncwarp();  // before the next pair's values overwrite lane_part
  }
  __syncthreads();
  for (int t = threadIdx.x; t < kRows * kSplitValues; t += kSplitThreads) {
    const int r = t / kSplitValues, m = t % kSplitValues;
    if (row_begin + r >= a.rows) continue;
    float v = 0.0f;
    for (int w = 0; w < kSplitThreads / 32; ++w) v += warp_part[w][r][m];
    a.workspace[(static_cast<std::int64_t>(row_begin + r) * num_slices + slice) * kSplitValues + m] = v;
  }
}

__global__ void __launch_bounds__(kPreThreads) v4_hc_pre_finish_kernel(V4HcPreArgs a) {
  __shared__ float sums[kSplitValues];
  __shared__ float mixes[kMaxMixes];
  __shared__ float pre[kHc];
  __shared__ double comb[kHc * kHc];
  const int row = blockIdx.x;
  const int width = a.hc * a.hidden, num_slices = width / kSliceWidth;
  const int num_mixes = a.head ? a.hc : (2 + a.hc) * a.hc;
  if (threadIdx.x < kSplitValues) {
    const float* part = a.workspace + static_cast<std::int64_t>(row) * num_slices * kSplitValues + threadIdx.x;
    float v = 0.0f;
    for (int sl = 0; sl < num_slices; ++sl) v += part[static_cast<std::int64_t>(sl) * kSplitValues];
    sums[threadIdx.x] = v;
  }
  __syncthreads();
  const float inv_rms = rsqrtf(sums[kMaxMixes] / static_cast<float>(width) + a.norm_eps);
  if (threadIdx.x < num_mixes) mixes[threadIdx.x] = sums[threadIdx.x] * inv_rms;
  __syncthreads();
  hc_pre_finish(a, row, a.streams + static_cast<std::int64_t>(row) * width, mixes, pre, comb);
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

std::int64_t v4_hc_pre_workspace_floats(std::int32_t rows, std::int32_t hc, std::int32_t hidden) {
  const std::int64_t width = std::int64_t{hc} * hidden;
  if (width % kSliceWidth != 0) return 0;
  return std::int64_t{rows} * (width / kSliceWidth) * kSplitValues;
}

void launch_v4_hc_pre(const V4HcPreArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.hc > 0 && args.hc <= kHc && args.hidden > 0);
  SLUICE_CHECK(args.streams != nullptr && args.w.fn != nullptr && args.w.base != nullptr && args.w.scale != nullptr &&
               args.collapsed != nullptr);
  SLUICE_CHECK(args.head || (args.post != nullptr && args.comb != nullptr && args.sinkhorn_iters >= 1));
  if (args.rows == 0) return;
  const bool vec = (args.hc * args.hidden) % 4 == 0 && reinterpret_cast<std::uintptr_t>(args.streams) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(args.w.fn) % 16 == 0;
  const bool prefill = args.rows > kPrefillRows;
  const int rows_a_block = prefill ? kPrefillSplitRows : kSplitRows;
  const int row_groups = (args.rows + rows_a_block - 1) / rows_a_block;
  if (args.workspace != nullptr && vec && v4_hc_pre_workspace_floats(args.rows, args.hc, args.hidden) > 0 &&
      row_groups <= 65535) {
    const dim3 grid(static_cast<unsigned>(args.hc * args.hidden / kSliceWidth),
                    static_cast<unsigned>(row_groups));
    if (prefill)
      v4_hc_pre_partials_kernel<kPrefillSplitRows><<<grid, kSplitThreads, 0, stream>>>(args);
    else
      v4_hc_pre_partials_kernel<kSplitRows><<<grid, kSplitThreads, 0, stream>>>(args);
    SLUICE_CUDA_CHECK_LAUNCH();
    // 0.35 ms a call at 8,192 rows with 512 threads, 0.21 with 128 (S21-21).
    v4_hc_pre_finish_kernel<<<static_cast<unsigned>(args.rows), prefill ? kPrefillFinishThreads : kPreThreads, 0,
                              stream>>>(args);
    SLUICE_CUDA_CHECK_LAUNCH();
    return;
  }
  if (vec)
    v4_hc_pre_kernel<true><<<static_cast<unsigned>(args.rows), kPreThreads, 0, stream>>>(args);
  else
    v4_hc_pre_kernel<false><<<static_cast<unsigned>(args.rows), kPreThreads, 0, stream>>>(args);
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
