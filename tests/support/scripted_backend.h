// A Backend that computes nothing and samples script[k] as the k-th generated
// token of every sequence, whatever the prompt (and whatever a mask allows: it
// never asks for late masks).
#pragma once

#include <algorithm>
#include <vector>

#include "sluice/backend/backend.h"

namespace sluice::testing {

class ScriptedBackend final : public Backend {
 public:
  ScriptedBackend(std::vector<TokenId> script, std::int32_t vocab_size, std::int32_t num_kv_blocks = 512)
      : script_(std::move(script)),
        info_{.name = "scripted", .block_size_tokens = 16, .num_kv_blocks = num_kv_blocks, .vocab_size = vocab_size,
              .max_model_len_tokens = 4096} {}
  const BackendInfo& info() const override { return info_; }
  Result<StepOutput> execute(const Batch& batch) override {
    StepOutput out;
    for (const SequenceStep& seq : batch.sequences) {
      SequenceOutput so{.seq_id = seq.seq_id};
      if (seq.sample) {
        const auto k = static_cast<std::size_t>(std::max(0, seq.end_position() - seq.num_prompt_tokens));
        so.token = script_[std::min(k, script_.size() - 1)];
      }
      out.sequences.push_back(std::move(so));
    }
    return out;
  }

 private:
  std::vector<TokenId> script_;
  BackendInfo info_;
};

}  // namespace sluice::testing
