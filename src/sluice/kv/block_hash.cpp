#include "sluice/kv/block_hash.h"

#include <xxhash.h>

#include "sluice/common/check.h"

namespace sluice {

BlockHash hash_block(BlockHash parent, std::uint64_t extra_key, std::span<const TokenId> block_tokens) {
  // The chain goes through the seed: (parent, extra_key) hashed to 64 bits
  // seeds the hash of the block's tokens.
  const std::uint64_t link[2] = {parent, extra_key};
  const XXH64_hash_t seed = XXH3_64bits(link, sizeof(link));
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), seed);
}

void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const TokenId> tokens,
                         std::int32_t block_size_tokens, std::uint64_t extra_key) {
  SLUICE_CHECK(block_size_tokens > 0);
  const std::size_t num_full_blocks = tokens.size() / static_cast<std::size_t>(block_size_tokens);
  while (hashes.size() < num_full_blocks) {
    const BlockHash parent = hashes.empty() ? kRootBlockHash : hashes.back();
    const std::size_t begin = hashes.size() * static_cast<std::size_t>(block_size_tokens);
    hashes.push_back(hash_block(parent, extra_key,
                                tokens.subspan(begin, static_cast<std::size_t>(block_size_tokens))));
  }
}

}  // namespace sluice
