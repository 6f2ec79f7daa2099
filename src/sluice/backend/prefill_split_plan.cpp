#include "sluice/backend/prefill_split_plan.h"

#include <algorithm>
#include <limits>

namespace sluice {

std::int32_t prefill_split_pieces_per_tile(std::int32_t num_tiles, std::int32_t num_q_heads,
                                           std::int32_t shortest_prefix, std::int32_t num_sms) {
  // Two blocks fit an SM (104 KB of shared memory each at head_dim 128). A
  // round of blocks takes time in proportion to a piece's keys (1 / pieces),
  // so the cost of splitting in `pieces` is rounds(pieces) / pieces; take the
  // fewest pieces within 5% of the best. Pieces keep >= 1024 keys each, where a
  // block's fixed cost (Q tile, merge) stays small against its key loop.
  constexpr std::int32_t kMinPieceKeys = 1024;
  const std::int64_t slots = 2LL * num_sms;
  const std::int64_t blocks = static_cast<std::int64_t>(num_tiles) * num_q_heads;
  if (blocks == 0 || blocks >= slots) return 1;
  const std::int32_t most = std::min(kMaxPrefillSplitPieces, shortest_prefix / kMinPieceKeys);
  auto cost = [&](std::int32_t pieces) {
    return static_cast<double>((blocks * pieces + slots - 1) / slots) / pieces;
  };
  double best = cost(1);
  for (std::int32_t n = 2; n <= most; ++n) best = std::min(best, cost(n));
  for (std::int32_t n = 1; n <= most; ++n)
    if (cost(n) <= best * 1.05) return n;
  return 1;
}

PrefillSplitPlan plan_prefill_split(std::vector<PrefillTile>& tiles, std::int32_t num_q_heads,
                                    std::int32_t num_sms) {
  PrefillSplitPlan plan;
  std::int32_t shortest_prefix = std::numeric_limits<std::int32_t>::max();
  for (const PrefillTile& t : tiles)
    if (t.first_position >= kPrefillSplitMinPrefix) shortest_prefix = std::min(shortest_prefix, t.first_position);
  if (shortest_prefix == std::numeric_limits<std::int32_t>::max()) return plan;
  plan.pieces_per_tile = prefill_split_pieces_per_tile(static_cast<std::int32_t>(tiles.size()), num_q_heads,
                                                       shortest_prefix, num_sms);
  if (plan.pieces_per_tile == 1) return plan;
  const std::int32_t n = plan.pieces_per_tile;
  std::erase_if(tiles, [&](const PrefillTile& t) {
    if (t.first_position < kPrefillSplitMinPrefix) return false;
    // Equal shares of the keys; inner bounds on key tiles, at or below the
    // tile's first position so every row sees a key in every piece.
    std::int32_t begin = 0;
    for (std::int32_t i = 1; i <= n; ++i) {
      const std::int32_t end =
          i == n ? t.kv_end
                 : std::min(t.first_position,
                            static_cast<std::int32_t>(static_cast<std::int64_t>(t.kv_end) * i / n /
                                                      kPrefillSplitKeyAlign * kPrefillSplitKeyAlign));
      plan.pieces.push_back({t.seq, t.row, begin, end});
      begin = end;
    }
    return true;
  });
  return plan;
}

}  // namespace sluice
