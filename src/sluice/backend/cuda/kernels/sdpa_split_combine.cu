// The combine of a key-split cuDNN SDPA step (cudnn_split_plan.h): each row of
// a split sequence has its causal tail's output (already in `out`) and one
// partial output per prefix piece, each normalised over its own keys, with
// the natural-log sum of exp of its scaled scores. The row's output is their
// average weighted by exp(lse_i - max lse), computed in f32 and written back
// over the tail's.
#include <cuda_bf16.h>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/launch.cuh"

namespace sluice::cuda {
namespace {

constexpr int kRowsPerBlock = 4;  // a warp a row
constexpr int kThreads = 32 * kRowsPerBlock;

__global__ void __launch_bounds__(kThreads) sdpa_split_combine_kernel(SdpaCombineArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int c = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (c >= a.num_rows) return;
  const int lane = threadIdx.x % 32;
  const int head = blockIdx.y;
  const std::int32_t* row = a.rows + 5 * c;  // out row, tail entry, row in sequence, first piece, pieces
  const int out_row = row[0], tail = row[1], local = row[2], first = row[3], pieces = row[4];
  const float tail_lse = a.tail_lse[(static_cast<std::int64_t>(tail) * a.num_heads + head) * a.tail_rows + local];
  auto piece_lse = [&](int p) {
    return a.piece_lse[(static_cast<std::int64_t>(first + p) * a.num_heads + head) * a.piece_rows + local];
  };
  float top = tail_lse;
  for (int p = 0; p < pieces; ++p) top = fmaxf(top, piece_lse(p));
  const float tail_weight = __expf(tail_lse - top);
  float total = tail_weight;
  for (int p = 0; p < pieces; ++p) total += __expf(piece_lse(p) - top);
  const float inv = 1.0f / total;
  __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(a.out) + static_cast<std::int64_t>(out_row) * a.out_row_elems + head * a.head_dim;
  for (int d = 2 * lane; d < a.head_dim; d += 64) {
    const float2 t = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dst + d));
    float2 acc = make_float2(tail_weight * t.x, tail_weight * t.y);
    for (int p = 0; p < pieces; ++p) {
      const float w = __expf(piece_lse(p) - top);
      const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(a.partial) +
                                 static_cast<std::int64_t>(a.piece_row_begin[first + p] + local) * a.out_row_elems +
                                 head * a.head_dim + d;
      const float2 o = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src));
      acc.x += w * o.x;
      acc.y += w * o.y;
    }
    *reinterpret_cast<__nv_bfloat162*>(dst + d) = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  }
}

}  // namespace

void launch_sdpa_split_combine(const SdpaCombineArgs& args, const Launch& launch) {
  if (args.num_rows == 0) return;
  SLUICE_CHECK(args.head_dim % 2 == 0);
  launch_kernel(sdpa_split_combine_kernel, dim3((args.num_rows + kRowsPerBlock - 1) / kRowsPerBlock, args.num_heads),
                dim3(kThreads), 0, launch, args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
