// Which cuDNN SDPA call a prefill step gets (cudnn_sdpa.h), decided on the
// host from the step's sequences alone.
//
// cuDNN's SDPA gives each (query tile, head) one block and cannot split a
// sequence's keys. A sluice step is often a short chunk over a long cached
// prefix (128-512 rows over 16k-131k keys): 32-128 blocks on 132 SMs, at
// 242-255 TFLOP/s against 483-534 for chunks that fill the GPU (S9-C2,
// docs/benchmarks.md). So such a step is split over keys: each long prefix
// is cut into pieces at block boundaries that every row of the chunk sees
// whole (no mask), attended as extra batch entries of one unmasked call;
// the rest of the keys (the chunk's own, after the last boundary) go
// through the causal call; both write softmax statistics, and a combine
// kernel (kernels/sdpa_split_combine.cu) weighs the partial outputs. A step
// whose blocks would leave its last wave mostly empty (e.g. 160 blocks on 132
// SMs) splits too, when its prefixes allow.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sluice::cuda {

// One sequence of the step as the router sees it: `num_rows` query rows at
// the end of `num_keys` keys.
struct SdpaShape {
  std::int32_t num_rows = 0, num_keys = 0;
};

enum class SdpaRoute {
  whole,    // one causal call: the step's query tiles fill the GPU
  split,    // prefix pieces + causal tails + combine
  decline,  // too few tiles and no prefix long enough to split: our kernel runs it
};

// Keys [key_begin, key_end) of one sequence, attended by every row of it.
struct SdpaKeyPiece {
  std::int32_t sequence = 0, key_begin = 0, key_end = 0;
};

struct SdpaRouting {
  SdpaRoute route = SdpaRoute::whole;
  // split only: per sequence, the first key of its causal tail (a multiple of
  // the block size; 0 where the sequence is not split), and the pieces of
  // [0, tail_begin) in sequence order.
  std::vector<std::int32_t> tail_begin;
  std::vector<SdpaKeyPiece> pieces;
};

// The query tile cuDNN's Hopper SDPA kernels run (an assumption that only
// sizes the split: a wrong value costs speed, never correctness).
inline constexpr std::int32_t kSdpaTileRows = 128;
// Shorter pieces cost more in fixed work (Q loads, epilogue, combine) than
// the parallelism buys.
inline constexpr std::int32_t kSdpaMinPieceKeys = 4096;
inline constexpr std::int32_t kSdpaMaxPiecesPerSequence = 64;
// A step whose blocks fill at least this share of their last wave runs whole;
// a less full one splits when that fills its waves by kSdpaSplitGain more.
inline constexpr double kSdpaWholeFill = 0.9;
inline constexpr double kSdpaSplitGain = 0.05;

SdpaRouting route_sdpa_step(std::span<const SdpaShape> sequences, std::int32_t num_q_heads,
                            std::int32_t block_size, std::int32_t num_sms);

}  // namespace sluice::cuda
