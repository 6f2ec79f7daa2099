// Prefix-cache keys. A full block's key is a hash chain: xxHash3 over the
// parent block's key, an extra key (anything besides token ids that changes
// the block's KV content, e.g. a cache salt or adapter id) and the block's
// token ids. Equal keys therefore mean equal prefixes, not just equal blocks.
// 64-bit keys: a collision among the ~10^6 blocks a node holds has probability
// ~10^-7; accepted, as the common engines do by default.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sluice/common/ids.h"

namespace sluice {

using BlockHash = std::uint64_t;

// The parent key of a sequence's first block.
inline constexpr BlockHash kRootBlockHash = 0x736c75696365ULL;  // "sluice"

BlockHash hash_block(BlockHash parent, std::uint64_t extra_key, std::span<const TokenId> block_tokens);

// Appends the keys of the full blocks of `tokens` that `hashes` does not have
// yet (hashes[i] covers tokens[i*block_size, (i+1)*block_size)).
void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const TokenId> tokens,
                         std::int32_t block_size_tokens, std::uint64_t extra_key);

}  // namespace sluice
