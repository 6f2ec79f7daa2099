// Device helpers the MLA kernels share (mla_prefill.cu, mla_decode.cu,
// mla_decode_mma.cu, mla_decode_wgmma.cu): how a decode row's keys are cut
// into splits, what a tensor-core decode block reads, and the simple
// kernels' one-score-at-a-time softmax.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "sluice/backend/cuda/kernels/mla_kernels.h"

namespace sluice::cuda {

struct KeyRange {
  int begin, end;  // [begin, end), empty when begin == end
};

// Split `split` of `num_splits` even ranges of [0, context_tokens), each a
// multiple of `align` keys long but the last. Both decode kernels cut a
// context this way, so their partials combine the same.
__device__ __forceinline__ KeyRange decode_split_range(int context_tokens, int num_splits, int split, int align) {
  int chunk = (context_tokens + num_splits - 1) / num_splits;
  chunk = (chunk + align - 1) / align * align;
  const int begin = min(context_tokens, split * chunk);
  return {begin, min(context_tokens, begin + chunk)};
}

// What a tensor-core decode block of (decode row i, key split, the heads
// from first_head) reads: its keys, its row's block table, and its first
// head's query [W_UK^T q_nope | q_rope] in q_latent.
struct MlaDecodeBlock {
  KeyRange range;
  const std::int32_t* table;
  const __nv_bfloat16* q;
};
__device__ __forceinline__ MlaDecodeBlock mla_decode_block(const StepDeviceView& step, const MlaDecodeArgs& a, int i,
                                                           int split, int first_head, int align) {
  const int seq = a.decode_seqs[i];
  const int width = a.kv_lora_rank + a.rope_dim;
  return {decode_split_range(step.seq_num_computed[seq] + 1, a.num_splits, split, align),
          step.block_tables + step.seq_block_offset[seq],
          static_cast<const __nv_bfloat16*>(a.q_latent) +
              (static_cast<std::int64_t>(i) * a.num_heads + first_head) * width};
}

// A running softmax (natural exp) over scores taken one at a time, as a warp
// of the simple kernels walks its keys: add() returns the factor outputs
// accumulated so far are rescaled by, and the new score's weight.
struct OnlineSoftmax {
  float max = -INFINITY;
  float sum = 0.0f;

  struct Step {
    float correction, weight;
  };
  __device__ __forceinline__ Step add(float score) {
    const float new_max = fmaxf(max, score);
    const Step step{__expf(max - new_max), __expf(score - new_max)};  // correction 0 while max is -inf
    sum = sum * step.correction + step.weight;
    max = new_max;
    return step;
  }
};

}  // namespace sluice::cuda
