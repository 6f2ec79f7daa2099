// The key range of one split of a decode row (mla_decode.cu, mla_decode_mma.cu):
// shared by both MLA decode kernels so they cut a context the same way.
#pragma once

namespace sluice::cuda {

struct KeyRange {
  int begin, end;  // [begin, end), empty when begin == end
};

// Split `split` of `num_splits` even ranges of [0, context_tokens), each a
// multiple of `align` keys long but the last.
__device__ __forceinline__ KeyRange decode_split_range(int context_tokens, int num_splits, int split, int align) {
  int chunk = (context_tokens + num_splits - 1) / num_splits;
  chunk = (chunk + align - 1) / align * align;
  const int begin = min(context_tokens, split * chunk);
  return {begin, min(context_tokens, begin + chunk)};
}

}  // namespace sluice::cuda
