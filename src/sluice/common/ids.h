// The ids every layer speaks: a token of the vocabulary, a sequence the engine
// runs, a KV block of the pool. Plain integers, named so signatures say which.
#pragma once

#include <cstdint>

namespace sluice {

using TokenId = std::int32_t;
using SequenceId = std::uint64_t;
using BlockId = std::int32_t;

// A candidate token and its log-probability (sampling output, API logprobs).
struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0.0f;
};

}  // namespace sluice
