// An allowed-token bitmask over the vocabulary: bit t (word t / 64) set means
// token t may be sampled. Structured output writes it; backends read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "sluice/common/ids.h"

namespace sluice {

// Words of a mask over `vocab_size` ids.
inline std::size_t num_token_mask_words(std::int32_t vocab_size) {
  return (static_cast<std::size_t>(vocab_size) + 63) / 64;
}

// Whether `bits` allows `token`; an empty mask allows every token.
inline bool token_mask_allows(std::span<const std::uint64_t> bits, TokenId token) {
  if (bits.empty()) return true;
  const auto t = static_cast<std::size_t>(token);
  return token >= 0 && t / 64 < bits.size() && ((bits[t / 64] >> (t % 64)) & 1u) != 0;
}

}  // namespace sluice
