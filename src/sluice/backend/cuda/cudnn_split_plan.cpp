// The routing rule of cudnn_split_plan.h.
#include "sluice/backend/cuda/cudnn_split_plan.h"

#include <algorithm>

namespace sluice::cuda {

SdpaRouting route_sdpa_step(std::span<const SdpaShape> sequences, std::int32_t num_q_heads,
                            std::int32_t block_size, std::int32_t num_sms) {
  SdpaRouting routing;
  std::int64_t tiles = 0;
  for (const SdpaShape& s : sequences)
    tiles += static_cast<std::int64_t>((s.num_rows + kSdpaTileRows - 1) / kSdpaTileRows) * num_q_heads;
  if (tiles >= num_sms) return routing;  // whole
  // Pieces per sequence: at least a wave of blocks, and the count whose last
  // wave is fullest (the smallest within 2% of the best), counted in waves of
  // two blocks an SM so the choice holds whether cuDNN fits one or two. 256
  // rows x 32 heads (64 tiles): 4 pieces (256 blocks), not 5 (320: 2.4 waves).
  const std::int64_t slots = 2 * static_cast<std::int64_t>(num_sms);
  auto fullness = [&](std::int64_t count) {
    const std::int64_t blocks = tiles * count;
    return static_cast<double>(blocks) / static_cast<double>((blocks + slots - 1) / slots * slots);
  };
  const std::int64_t least = (num_sms + tiles - 1) / tiles, most = (2 * slots + tiles - 1) / tiles;
  double best = 0.0;
  for (std::int64_t count = least; count <= most; ++count) best = std::max(best, fullness(count));
  std::int64_t chosen = least;
  while (fullness(chosen) < best - 0.02) ++chosen;
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
    routing.route = SdpaRoute::decline;
    return routing;
  }
  routing.route = SdpaRoute::split;
  return routing;
}

}  // namespace sluice::cuda
