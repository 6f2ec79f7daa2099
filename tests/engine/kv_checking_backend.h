// A Backend for engine tests that keeps what a real KV cache would hold: the
// token id written at each (block, slot). Every step it checks that the block
// table really holds the sequence's tokens at every computed position (so a
// wrong prefix hit, a leaked or reused block shows up as an error), writes
// the new ones, and samples a token that depends on the whole context:
// generation through the engine must equal reference_generate() token for token.
// With a host tier it also keeps host slots and runs Batch::copies late: each
// copy completes 0-2 steps after it started (a seeded choice), moves its data
// only then, and any step that reads or writes a block under a copy against
// its direction fails, so a block reused before its copy completed, or a
// sequence run before its prefix landed, shows up as an error.
#pragma once

#include <cstdint>
#include <deque>
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

  // A host tier of copies that take 0..max_copy_delay_steps steps; bytes and rate feed the planner's pricing.
  void enable_host_tier(double host_link_bytes_per_s, std::uint64_t seed, std::int32_t max_copy_delay_steps = 2) {
    info_.kv_bytes_per_block = 1024;
    info_.host_link_bytes_per_s = host_link_bytes_per_s;
    copy_rng_ = SplitMix64(seed);
    max_copy_delay_steps_ = max_copy_delay_steps;
  }

  const BackendInfo& info() const override { return info_; }

  Status allocate_host_kv_cache(std::int32_t num_blocks) override {
    if (info_.kv_bytes_per_block == 0) return Error{"no host tier"};
    host_slots_.assign(static_cast<std::size_t>(num_blocks) * static_cast<std::size_t>(info_.block_size_tokens), -1);
    return Ok{};
  }

  std::int64_t num_copies_started() const { return num_copies_started_; }

  Result<StepOutput> execute(const Batch& batch) override {
    StepOutput out;
    StepShape shape;
    const std::int32_t bs = info_.block_size_tokens;
    for (const KvBlockCopy& c : batch.copies) {
      if (host_slots_.empty()) return Error{"a copy without a host tier"};
      if (c.device_block < 0 || c.device_block >= info_.num_kv_blocks ||
          c.host_block < 0 || static_cast<std::size_t>(c.host_block + 1) * bs > host_slots_.size()) {
        return Error{"copy " + std::to_string(c.id) + " names a block outside the pools"};
      }
      if (std::any_of(pending_.begin(), pending_.end(), [&](const Pending& q) { return q.copy.id == c.id; })) continue;
      const auto delay = static_cast<std::int32_t>(copy_rng_.next() % static_cast<std::uint64_t>(max_copy_delay_steps_ + 1));
      pending_.push_back({.copy = c, .steps_left = delay});
      ++num_copies_started_;
    }
    for (const SequenceStep& s : batch.sequences) {
      for (std::int32_t p = 0; p < s.end_position(); ++p) {
        const BlockId b = s.block_table[static_cast<std::size_t>(p / bs)];
        const bool writes = p >= s.num_computed_tokens;
        for (const Pending& q : pending_) {
          if (q.copy.device_block != b) continue;
          if (q.copy.direction == KvCopyDirection::kHostToDevice || writes) {
            return Error{"sequence " + std::to_string(s.seq_id) + " touches block " + std::to_string(b) +
                         " while copy " + std::to_string(q.copy.id) + " runs"};
          }
        }
      }
    }
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
    // A wait (no sequences) completes at least the oldest copy.
    if (batch.sequences.empty() && !pending_.empty()) pending_.front().steps_left = 0;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->steps_left-- > 0) {
        ++it;
        continue;
      }
      finish_copy(it->copy);
      out.completed_copies.push_back({.id = it->copy.id});
      it = pending_.erase(it);
    }
    return out;
  }

  std::int64_t num_steps() const { return num_steps_; }

 private:
  TokenId& slot(std::span<const BlockId> table, std::int32_t position) {
    const std::int32_t bs = info_.block_size_tokens;
    const auto block = static_cast<std::size_t>(table[static_cast<std::size_t>(position / bs)]);
    return slots_[block * static_cast<std::size_t>(bs) + static_cast<std::size_t>(position % bs)];
  }

  struct Pending {
    KvBlockCopy copy;
    std::int32_t steps_left = 0;
  };
  void finish_copy(const KvBlockCopy& c) {
    const auto bs = static_cast<std::size_t>(info_.block_size_tokens);
    TokenId* device = &slots_[static_cast<std::size_t>(c.device_block) * bs];
    TokenId* host = &host_slots_[static_cast<std::size_t>(c.host_block) * bs];
    if (c.direction == KvCopyDirection::kDeviceToHost) {
      std::copy(device, device + bs, host);
    } else {
      std::copy(host, host + bs, device);
    }
  }

  BackendInfo info_;
  std::vector<TokenId> slots_;  // [num_blocks * block_size]
  std::vector<TokenId> host_slots_;  // [num_host_blocks * block_size]
  std::deque<Pending> pending_;      // copies started, not completed; oldest first
  SplitMix64 copy_rng_{0};
  std::int32_t max_copy_delay_steps_ = 0;
  std::int64_t num_copies_started_ = 0;
  TokenId poison_token_;
  TokenCountCostModel cost_;
  std::int64_t num_steps_ = 0;
};

}  // namespace sluice::testing
