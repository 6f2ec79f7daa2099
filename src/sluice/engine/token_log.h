// TokenLog: a request's tokens as the step pipeline's worker sees them, under
// async scheduling. Batches in flight read [0, end) of it while the engine
// thread moves on, so it never moves: its storage is sized once, for the
// request's longest possible length. The engine writes the prompt when it makes
// the log, before the first batch that names it is submitted; from then on only
// the worker writes, appending each token it samples for the request, so the
// token a decode consumes is there before the decode runs, and no batch copies
// a history.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "sluice/common/ids.h"
#include "sluice/common/check.h"

namespace sluice {

class TokenLog {
 public:
  TokenLog(std::span<const TokenId> tokens, std::int32_t capacity_tokens)
      : data_(new TokenId[static_cast<std::size_t>(capacity_tokens)]),  // not zeroed: untouched pages stay free
        capacity_tokens_(capacity_tokens) {
    SLUICE_CHECK_LE(static_cast<std::int64_t>(tokens.size()), static_cast<std::int64_t>(capacity_tokens));
    for (std::size_t i = 0; i < tokens.size(); ++i) data_[i] = tokens[i];
    num_tokens_ = static_cast<std::int32_t>(tokens.size());
  }

  // The worker's side (and the engine's, before the first submit).
  std::int32_t num_tokens() const { return num_tokens_; }
  std::span<const TokenId> first(std::int32_t n) const {
    SLUICE_CHECK_LE(n, num_tokens_);
    return {data_.get(), static_cast<std::size_t>(n)};
  }
  void append(TokenId token) {
    SLUICE_CHECK_LT(num_tokens_, capacity_tokens_);
    data_[static_cast<std::size_t>(num_tokens_++)] = token;
  }

 private:
  std::unique_ptr<TokenId[]> data_;
  std::int32_t capacity_tokens_;
  std::int32_t num_tokens_ = 0;
};

}  // namespace sluice
