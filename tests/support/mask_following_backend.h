// A Backend that stands in for a model under structured output: it computes
// nothing and samples among the tokens the step allows. It takes the first
// allowed token of a preference list (so a test can steer it to close an
// object), else a pseudo-random allowed token keyed by (sequence, position).
// A sampled step without a mask is an error: the engine must always send one
// for a constrained request.
#pragma once

#include <vector>

#include "sluice/backend/backend.h"
#include "sluice/common/rng.h"

namespace sluice::testing {

class MaskFollowingBackend final : public Backend {
 public:
  MaskFollowingBackend(std::int32_t vocab_size, std::vector<TokenId> preference)
      : info_{.name = "mask-following", .block_size_tokens = 16, .num_kv_blocks = 512, .vocab_size = vocab_size,
              .max_model_len_tokens = 4096},
        preference_(std::move(preference)) {}

  const BackendInfo& info() const override { return info_; }

  Result<StepOutput> execute(const Batch& batch) override {
    batch.fill_late_masks();
    StepOutput out;
    out.step_time_ms = 1.0;
    for (const SequenceStep& seq : batch.sequences) {
      SequenceOutput so{.seq_id = seq.seq_id};
      if (seq.sample) {
        if (seq.allowed_tokens.empty()) return Error{"a constrained request arrived without a mask"};
        ++num_masked_samples_;
        so.token = pick(seq.allowed_tokens, seq.seq_id * 1000 + static_cast<std::uint64_t>(seq.end_position()));
      }
      out.sequences.push_back(std::move(so));
    }
    return out;
  }

  std::int64_t num_masked_samples() const { return num_masked_samples_; }

 private:
  TokenId pick(std::span<const std::uint64_t> allowed, std::uint64_t key) const {
    for (TokenId t : preference_)
      if (token_mask_allows(allowed, t)) return t;
    std::vector<TokenId> candidates;
    for (TokenId t = 0; t < info_.vocab_size; ++t)
      if (token_mask_allows(allowed, t)) candidates.push_back(t);
    return candidates[splitmix64(key) % candidates.size()];
  }

  BackendInfo info_;
  std::vector<TokenId> preference_;
  std::int64_t num_masked_samples_ = 0;
};

}  // namespace sluice::testing
