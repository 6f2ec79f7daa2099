// The routing rule of cudnn_split_plan.h.
#include "sluice/backend/cuda/cudnn_split_plan.h"

#include <algorithm>

namespace sluice::cuda {

SdpaRouting route_sdpa_step(std::span<const SdpaShape> sequences, std::int32_t num_q_heads,
                            std::int32_t block_size, std::int32_t num_sms) {
  SdpaRouting routing;
  std::int64_t tiles = 0;
  bool any_long_prefix = false;
  for (const SdpaShape& s : sequences) {
    tiles += static_cast<std::int64_t>((s.num_rows + kSdpaTileRows - 1) / kSdpaTileRows) * num_q_heads;
    any_long_prefix = any_long_prefix || s.num_keys - s.num_rows >= kSdpaMinPieceKeys + block_size;
  }
  // cuDNN runs one block an SM (S11-lead-a: 640 rows over 32k, 160 blocks in
  // two waves of 132, ran at 61% of the 1,024-row rate), and a chunk's blocks
  // over a long prefix take about equally long: a step's speed is the share
  // of its last wave that is full.
  const std::int64_t sms = num_sms;
  auto fill = [&](std::int64_t blocks) {
    return static_cast<double>(blocks) / static_cast<double>((blocks + sms - 1) / sms * sms);
  };
  const double whole_fill = tiles >= sms ? fill(tiles) : 0.0;
  if (whole_fill >= kSdpaWholeFill || (tiles >= sms && !any_long_prefix)) return routing;  // whole
  // Pieces per sequence: at least two and a wave of blocks, at most four
  // waves; the count whose last wave is fullest (the smallest within 2% of
  // the best). 256 rows x 32 heads (64 tiles): 4 pieces (256 blocks, 97%);
  // 640 rows (160 tiles): 4 (640 blocks, 97%), not whole (61%).
  const std::int64_t least = std::max<std::int64_t>(2, (sms + tiles - 1) / tiles);
  const std::int64_t most = std::max(least, (4 * sms + tiles - 1) / tiles);
  double best = 0.0;
  for (std::int64_t count = least; count <= most; ++count) best = std::max(best, fill(tiles * count));
  std::int64_t chosen = least;
  while (fill(tiles * chosen) < best - 0.02) ++chosen;
  if (whole_fill > 0.0 && best < whole_fill + kSdpaSplitGain) return routing;  // whole: splitting buys little
  const auto wanted = static_cast<std::int32_t>(std::min<std::int64_t>(chosen, kSdpaMaxPiecesPerSequence));
  routing.tail_begin.assign(sequences.size(), 0);
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const SdpaShape& s = sequences[i];
    // Keys every row sees: the prefix, cut back to a block boundary.
    const std::int32_t prefix = s.num_keys - s.num_rows;
    const std::int32_t whole_blocks = prefix / block_size * block_size;
    const std::int32_t count = std::min(wanted, whole_blocks / kSdpaMinPieceKeys);
    if (count < 1) continue;
    // Equal pieces of whole blocks; the first ones take the remainder blocks.
    const std::int32_t blocks = whole_blocks / block_size;
    std::int32_t begin = 0;
    for (std::int32_t p = 0; p < count; ++p) {
      const std::int32_t piece_blocks = blocks / count + (p < blocks % count ? 1 : 0);
      routing.pieces.push_back({.sequence = static_cast<std::int32_t>(i), .key_begin = begin,
                                .key_end = begin + piece_blocks * block_size});
      begin += piece_blocks * block_size;
    }
    routing.tail_begin[i] = whole_blocks;
  }
  if (routing.pieces.empty()) {
    routing.tail_begin.clear();
    routing.route = SdpaRoute::decline;  // (a step of >= sms tiles has a long prefix here: it split)
    return routing;
  }
  routing.route = SdpaRoute::split;
  return routing;
}

}  // namespace sluice::cuda
