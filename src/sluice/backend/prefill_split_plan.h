// Which prefill query tiles of a step have their keys split over several
// blocks, and where: a short chunk over a long cached prefix gives too few
// (tile, head) blocks to fill the GPU, each walking the whole prefix. Host-only
// planning for the CUDA backend's split prefill attention (kernels in
// backend/cuda/kernels/attention_prefill.cu), kept free of CUDA so CI tests it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace sluice {

// Key tiles of the split pieces: inner piece bounds are multiples of this.
inline constexpr std::int32_t kPrefillSplitKeyAlign = 128;
// The most pieces one tile is cut into (the merge kernel sizes its weights by it).
inline constexpr std::int32_t kMaxPrefillSplitPieces = 16;
// Tiles whose every row sees at least this many keys may be split.
inline constexpr std::int32_t kPrefillSplitMinPrefix = 4096;

struct PrefillTile {
  std::int32_t seq = 0;             // sequence index in the step
  std::int32_t row = 0;             // first row of the tile within the sequence
  std::int32_t first_position = 0;  // position of that row: keys every row of the tile sees
  std::int32_t kv_end = 0;          // one past the last key any row of the tile sees
};

struct PrefillSplitPlan {
  // Per piece (sequence, first row, first key, end key); one tile's pieces adjacent.
  std::vector<std::array<std::int32_t, 4>> pieces;
  std::int32_t pieces_per_tile = 1;
};

// How many pieces each of `num_tiles` tiles should become so that
// num_tiles * num_q_heads blocks, two an SM, fill `num_sms` SMs evenly; 1 = no
// split. `shortest_prefix` bounds it (pieces keep >= 1024 keys).
std::int32_t prefill_split_pieces_per_tile(std::int32_t num_tiles, std::int32_t num_q_heads,
                                           std::int32_t shortest_prefix, std::int32_t num_sms);

// Plans the step: the tiles it splits are removed from `tiles` (order kept) and
// returned as pieces.
PrefillSplitPlan plan_prefill_split(std::vector<PrefillTile>& tiles, std::int32_t num_q_heads,
                                    std::int32_t num_sms);

}  // namespace sluice
