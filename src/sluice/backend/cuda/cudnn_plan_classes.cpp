// The shape classes of cudnn_plan_classes.h.
#include "sluice/backend/cuda/cudnn_plan_classes.h"

#include <algorithm>
#include <bit>

#include "sluice/backend/cuda/cudnn_split_plan.h"

namespace sluice::cuda {
std::int64_t pow2_at_least(std::int64_t n, std::int64_t floor) {
  return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max(n, floor))));
}

namespace {

// Key classes: a call's keys are rounded up to a power of two of at least
// 64 and a page.
std::int64_t least_keys(std::int32_t block_size) { return std::max<std::int64_t>(64, block_size); }

// The key classes of calls whose longest key range lies in [lo, hi].
std::vector<std::int64_t> key_classes(std::int64_t lo, std::int64_t hi, std::int32_t block_size) {
  std::vector<std::int64_t> classes;
  if (hi < lo) return classes;
  const std::int64_t last = pow2_at_least(hi, least_keys(block_size));
  for (std::int64_t c = pow2_at_least(lo, least_keys(block_size)); c <= last; c *= 2) classes.push_back(c);
  return classes;
}

// The most piece entries one split call can have (cudnn_split_plan.cpp):
// n sequences make at least n x heads query tiles, and each is cut into at
// most max(least, most) pieces of that many tiles, at most 64.
std::int64_t most_piece_entries(const SdpaServingBounds& bounds, std::int32_t num_sms) {
  std::int64_t most_entries = 1;
  for (std::int64_t n = 1; n <= bounds.max_sequences; ++n) {
    const std::int64_t tiles = n * bounds.num_q_heads;
    const std::int64_t least = std::max<std::int64_t>(2, (num_sms + tiles - 1) / tiles);
    const std::int64_t most = std::max(least, (4 * num_sms + tiles - 1) / tiles);
    most_entries = std::max(most_entries, n * std::min<std::int64_t>(most, kSdpaMaxPiecesPerSequence));
  }
  return most_entries;
}

}  // namespace

SdpaCallClass sdpa_call_class(bool paged, bool causal, bool stats, std::int64_t num_entries, std::int64_t max_rows,
                              std::int64_t max_keys, std::int32_t block_size) {
  // The batch is padded to a power of two with empty entries (cuDNN skips
  // sequences of length 0), so the classes are few.
  return {.paged = paged,
          .causal = causal,
          .stats = stats,
          .b = pow2_at_least(num_entries, 1),
          .sq = pow2_at_least(max_rows, 64),
          .skv = pow2_at_least(max_keys, least_keys(block_size))};
}

std::vector<SdpaCallClass> sdpa_serving_classes(const SdpaServingBounds& bounds, std::int32_t block_size,
                                                std::int32_t num_sms) {
  std::vector<SdpaCallClass> classes;
  if (bounds.max_step_rows < 2 || bounds.max_keys < 2 || bounds.max_sequences < 1 || bounds.num_q_heads < 1)
    return classes;
  const std::int64_t max_rows = bounds.max_step_rows, max_keys = bounds.max_keys;
  for (std::int64_t sq = 64; sq <= pow2_at_least(max_rows, 64); sq *= 2) {
    // The longest sequence of a call of this class has rows in [lo, hi].
    const std::int64_t lo = sq == 64 ? 2 : sq / 2 + 1, hi = std::min(sq, max_rows);
    if (lo > max_rows) break;
    for (std::int64_t b = 1; b <= pow2_at_least(bounds.max_sequences, 1); b *= 2) {
      // b entries are b / 2 + 1 sequences at least, each of two rows or more.
      const std::int64_t fewest = b == 1 ? 1 : b / 2 + 1;
      if (fewest > bounds.max_sequences || lo + 2 * (fewest - 1) > max_rows) continue;
      // Whole, prompts from position 0: K and V packed, as many keys as rows.
      for (std::int64_t skv : key_classes(lo, hi, block_size))
        classes.push_back({.paged = false, .causal = true, .stats = false, .b = b, .sq = sq, .skv = skv});
      // Whole over cached prefixes: any number of keys past the rows.
      for (std::int64_t skv : key_classes(lo, max_keys, block_size))
        classes.push_back({.paged = true, .causal = true, .stats = false, .b = b, .sq = sq, .skv = skv});
      // Split tails: a split sequence's rows and less than a page before
      // them; a sequence left whole, its rows over a prefix too short to cut.
      for (std::int64_t skv :
           key_classes(lo, std::min(max_keys, hi + kSdpaMinPieceKeys + block_size - 1), block_size))
        classes.push_back({.paged = true, .causal = true, .stats = true, .b = b, .sq = sq, .skv = skv});
    }
    // Split pieces: whole blocks of a prefix, kSdpaMinPieceKeys at least.
    for (std::int64_t b = 1; b <= pow2_at_least(most_piece_entries(bounds, num_sms), 1); b *= 2)
      for (std::int64_t skv : key_classes(kSdpaMinPieceKeys, max_keys - 1, block_size))
        classes.push_back({.paged = true, .causal = false, .stats = true, .b = b, .sq = sq, .skv = skv});
  }
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  return classes;
}

}  // namespace sluice::cuda
