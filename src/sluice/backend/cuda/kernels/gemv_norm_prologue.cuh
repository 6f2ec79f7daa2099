// The decode GEMVs' norm prologue (GemvNorm, kernels.h): the add_rms_norm
// before the q|k|v and gate|up GEMVs, computed by every block of the GEMV
// instead of by a kernel of its own. At batch 1 that norm is one block
// reading 16 KB: ~2-4 us a layer twice on the step's critical path while HBM
// idles (ncu, S3: 3.7 us each), out of a ~130 us layer.
//
// Why every block: the GEMV's blocks each need the whole normed row, and
// there is no grid-wide barrier to wait for one block to make it. A row is
// 8 KB at hidden 4096 (16 KB with x), read from L2 by each block: small beside
// the block's weights, and it runs while the block's first weights, loaded
// before pdl_wait(), are in flight.
//
// The residual is read by every block and updated in place, so no block may
// write it before all have read it: each block counts itself on `arrivals`
// after its reads, and the last to arrive writes the new residual and the
// normed rows (for any later reader of the norm's output), then zeroes the
// counter. The next launch touches the counter only after its own
// pdl_wait(), so after this grid completed.
#pragma once

#include <cuda_bf16.h>

#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/rms_norm_row.cuh"

namespace sluice::cuda {

// After pdl_wait(), every thread of the block: the kRows normed rows of
// `vecs` 16-byte vectors into s_x ([kRows][vecs], shared memory). The sums run
// in norm_bf16_kernel's thread order (rms_norm_row.cuh), so the rows are the
// bits launch_add_rms_norm() writes.
template <int kRows>
__device__ __forceinline__ void gemv_norm_prologue(const GemvNorm& n, int vecs, uint4* s_x) {
  __shared__ float scratch[32];
  __shared__ int is_last;
  auto* residual = static_cast<uint4*>(n.residual);
  const auto* x = static_cast<const uint4*>(n.x);
  const int threads = norm_row_threads(vecs);
  float sum_sq[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    sum_sq[m] = 0.0f;
    if (static_cast<int>(threadIdx.x) >= threads) continue;
    for (int idx = threadIdx.x; idx < vecs; idx += threads) {
      uint4 r = residual[m * vecs + idx];
      float v[8];
      norm_row_vec<true>(x[m * vecs + idx], r, v, sum_sq[m]);
      s_x[m * vecs + idx] = r;  // the new residual; normed in place below
    }
  }
  __syncthreads();  // every read of this block's residual is done
  if (threadIdx.x == 0) {
    __threadfence();
    is_last = atomicAdd(n.arrivals, 1u) == gridDim.x - 1;
  }
  float inv_rms[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) inv_rms[m] = norm_row_inv_rms(block_sum(sum_sq[m], scratch), vecs * 8, n.eps);
  const bool last = is_last;  // block_sum's barriers made thread 0's write visible
  auto* out = static_cast<uint4*>(n.out);
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    for (int idx = threadIdx.x; idx < vecs; idx += blockDim.x) {
      // A pair at a time (few registers: the block's first weights are held
      // in them); the residual as stored, so the pair's f32 values are the
      // norm kernel's.
      const uint4 r = s_x[m * vecs + idx];
      const __nv_bfloat162* rh = reinterpret_cast<const __nv_bfloat162*>(&r);
      uint4 o;
      __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(rh[i]);
        oh[i] = norm_row_out_pair(f.x, f.y, inv_rms[m], load_f(n.weight, n.w_dt, idx * 8 + 2 * i),
                                  load_f(n.weight, n.w_dt, idx * 8 + 2 * i + 1));
      }
      s_x[m * vecs + idx] = o;
      if (last) {
        residual[m * vecs + idx] = r;
        out[m * vecs + idx] = o;
      }
    }
  }
  if (last && threadIdx.x == 0) *n.arrivals = 0;
  __syncthreads();
}

}  // namespace sluice::cuda
