// A Backend for engine tests that keeps what a real KV cache would hold: the
// token id written at each (block, slot). Every step it checks that the block
// table really holds the sequence's tokens at every computed position (so a
// wrong prefix hit, a leaked or reused block shows up as an error), writes
// the new ones, and samples a token that depends on the whole context:
// generation through the engine must equal reference_generate() token for token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/backend/backend.h"
#include "sluice/common/rng.h"
#include "sluice/sched/token_count_cost_model.h"

namespace sluice::testing {

inline constexpr std::int32_t kVocab = 1000;

// The "model": the next token is a hash of the whole context.
inline TokenId next_token(std::span<const TokenId> context) {
  std::uint64_t h = 0x1234;
  for (TokenId t : context) h = splitmix64(h ^ static_cast<std::uint64_t>(t));
  return static_cast<TokenId>(h % kVocab);
}

// The single-sequence oracle: greedy generation until a stop id or max_tokens.
inline std::vector<TokenId> reference_generate(std::vector<TokenId> context, std::int32_t max_tokens,
                                               const std::vector<TokenId>& stop_ids = {}) {
  std::vector<TokenId> out;
  while (static_cast<std::int32_t>(out.size()) < max_tokens) {
    const TokenId t = next_token(context);
    out.push_back(t);
    context.push_back(t);
    if (std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end()) break;
  }
  return out;
}

class KvCheckingBackend final : public Backend {
 public:
  // poison_token: a sequence containing it fails (to test failure isolation).
  KvCheckingBackend(std::int32_t num_blocks, std::int32_t block_size_tokens, std::int32_t max_model_len_tokens,
                    TokenId poison_token = -1)
      : info_{.name = "kv-checking",
              .block_size_tokens = block_size_tokens,
              .num_kv_blocks = num_blocks,
              .vocab_size = kVocab,
              .max_model_len_tokens = max_model_len_tokens},
        slots_(static_cast<std::size_t>(num_blocks) * static_cast<std::size_t>(block_size_tokens), -1),
        poison_token_(poison_token) {}

  const BackendInfo& info() const override { return info_; }

  Result<StepOutput> execute(const Batch& batch) override {
    StepOutput out;
    StepShape shape;
    const std::int32_t bs = info_.block_size_tokens;
    for (const SequenceStep& s : batch.sequences) {
      if (poison_token_ >= 0 && std::find(s.tokens.begin(), s.tokens.end(), poison_token_) != s.tokens.end()) {
        return Error{"poisoned sequence " + std::to_string(s.seq_id)};
      }
      if (static_cast<std::int64_t>(s.block_table.size()) * bs < s.end_position()) {
        return Error{"block table too short for sequence " + std::to_string(s.seq_id)};
      }
      if (s.num_new_tokens < 1 || s.end_position() > static_cast<std::int32_t>(s.tokens.size())) {
        return Error{"bad step range for sequence " + std::to_string(s.seq_id)};
      }
      for (std::int32_t p = 0; p < s.num_computed_tokens; ++p) {
        if (slot(s.block_table, p) != s.tokens[static_cast<std::size_t>(p)]) {
          return Error{"KV mismatch: sequence " + std::to_string(s.seq_id) + " position " + std::to_string(p)};
        }
      }
      for (std::int32_t p = s.num_computed_tokens; p < s.end_position(); ++p) {
        slot(s.block_table, p) = s.tokens[static_cast<std::size_t>(p)];
      }
      SequenceOutput o{.seq_id = s.seq_id};
      if (s.sample) {
        o.token = next_token(s.tokens.first(static_cast<std::size_t>(s.end_position())));
        o.logprob = -0.5f;
      }
      out.sequences.push_back(std::move(o));
      shape.sequences.push_back({.num_new_tokens = s.num_new_tokens, .num_computed_tokens = s.num_computed_tokens});
    }
    out.step_time_ms = cost_.predict_step_ms(shape);
    ++num_steps_;
    return out;
  }

  std::int64_t num_steps() const { return num_steps_; }

 private:
  TokenId& slot(std::span<const BlockId> table, std::int32_t position) {
    const std::int32_t bs = info_.block_size_tokens;
    const auto block = static_cast<std::size_t>(table[static_cast<std::size_t>(position / bs)]);
    return slots_[block * static_cast<std::size_t>(bs) + static_cast<std::size_t>(position % bs)];
  }

  BackendInfo info_;
  std::vector<TokenId> slots_;  // [num_blocks * block_size]
  TokenId poison_token_;
  TokenCountCostModel cost_;
  std::int64_t num_steps_ = 0;
};

}  // namespace sluice::testing
