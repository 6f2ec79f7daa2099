#include "sluice/kv/reuse_history.h"

#include <algorithm>
#include <limits>

#include "sluice/common/check.h"

namespace sluice {
namespace {

// A 64-bit finaliser (splitmix64's): the block keys are already hashes, but
// the rows need independent indices, so each row mixes the key with its own seed.
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

constexpr std::uint64_t kRowSeeds[] = {0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL, 0x165667b19e3779f9ULL,
                                       0x27d4eb2f165667c5ULL};

}  // namespace

ReuseHistory::ReuseHistory(std::int64_t counters_per_row) {
  SLUICE_CHECK(counters_per_row > 0 && counters_per_row <= (std::int64_t{1} << 32));
  std::uint64_t width = 64;
  while (width < static_cast<std::uint64_t>(counters_per_row)) width <<= 1;
  mask_ = width - 1;
  counters_.assign(static_cast<std::size_t>(width) * kRows, 0);
}

std::size_t ReuseHistory::slot(int row, BlockHash hash) const {
  const std::uint64_t h = mix(static_cast<std::uint64_t>(hash) ^ kRowSeeds[row]);
  return static_cast<std::size_t>(row) * static_cast<std::size_t>(mask_ + 1) + static_cast<std::size_t>(h & mask_);
}

void ReuseHistory::record(BlockHash hash) {
  const Counter least = static_cast<Counter>(count(hash));
  if (least == std::numeric_limits<Counter>::max()) return;  // saturated
  for (int row = 0; row < kRows; ++row) {
    Counter& c = counters_[slot(row, hash)];
    if (c == least) ++c;
  }
}

std::int32_t ReuseHistory::count(BlockHash hash) const {
  Counter least = std::numeric_limits<Counter>::max();
  for (int row = 0; row < kRows; ++row) least = std::min(least, counters_[slot(row, hash)]);
  return least;
}

}  // namespace sluice
