// TokenConstraint: a per-request rule on which tokens may come next
// (structured output: JSON mode today, schemas and grammars later). The
// engine asks for the allowed set before each sampled step, passes it to the
// backend as a vocabulary bitmask, and reports the chosen token back. Owned
// by one request and used by one thread: the step pipeline drives it (the
// engine thread inline, the pipeline's worker under async scheduling), filling
// the mask once the step's forward is launched and reporting the token after.
#pragma once

#include <cstdint>
#include <span>

#include "sluice/common/ids.h"
#include "sluice/common/result.h"

namespace sluice {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets bit t of `allowed_bits` (word t / 64, bit t % 64) for every token id
  // t that may come next; the span covers the backend's vocabulary and
  // arrives zeroed. At least one bit must be set (an end token when nothing
  // else fits).
  virtual void fill_allowed(std::span<std::uint64_t> allowed_bits) = 0;
  // Advances past the sampled token. An error means the backend ignored the
  // mask; the engine fails the request with it.
  virtual Status accept(TokenId token) = 0;
};

}  // namespace sluice
