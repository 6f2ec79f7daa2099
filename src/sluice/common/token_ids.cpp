#include "sluice/common/token_ids.h"

#include <fmt/format.h>

namespace sluice {

Status check_token_ids(std::span<const TokenId> ids, std::int32_t vocab_size) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return Error{fmt::format("token id {} at position {} is outside the vocabulary [0, {})", ids[i], i, vocab_size),
                   ErrorCode::kInvalidArgument};
    }
  }
  return Ok{};
}

}  // namespace sluice
