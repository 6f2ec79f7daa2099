// The check of token ids a user supplies, wherever they enter: the engine's
// request checks (engine/request_validation.h) and `sluice generate`, which
// drives a backend without the engine. Past these, an id outside the
// vocabulary is a bug (backends assert it).
#pragma once

#include <cstdint>
#include <span>

#include "sluice/common/ids.h"
#include "sluice/common/result.h"

namespace sluice {

// kInvalidArgument naming the first id outside [0, vocab_size) and its position.
Status check_token_ids(std::span<const TokenId> ids, std::int32_t vocab_size);

}  // namespace sluice
