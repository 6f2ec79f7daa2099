// Device helpers the MLA kernels share (mla_prefill.cu, mla_decode.cu,
// mla_decode_mma.cu): how a decode row's keys are cut into splits, and the
// simple kernels' one-score-at-a-time softmax.
#pragma once

#include <cmath>

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
