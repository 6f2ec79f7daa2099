#include "sluice/backend/cuda/sample_pack.h"

#include <algorithm>

#include "sluice/common/rng.h"

namespace sluice::cuda {

void DeviceSamplePack::clear() {
  rows.clear();
  penalties.clear();
  mask_words.clear();
}

void DeviceSamplePack::add(const SampleRequest& request, std::int32_t logits_row, std::int64_t vocab) {
  const SamplingParams& params = request.params;
  DeviceSampleRow row{
      .uniform = uniform_from(params.seed, static_cast<std::uint64_t>(request.generated_index)),
      .logits_row = logits_row,
      .greedy = params.is_greedy() ? 1 : 0,
      .inverse_temperature = params.is_greedy() ? 1.0f : 1.0f / params.temperature,
      .top_k = params.top_k,
      .top_p = params.top_p,
      .min_p = params.min_p,
      .repetition_penalty = params.repetition_penalty,
      .presence_penalty = params.presence_penalty,
      .frequency_penalty = params.frequency_penalty,
      .num_top_logprobs = params.num_top_logprobs,
      .penalty_begin = static_cast<std::int32_t>(penalties.size()),
  };
  if (params.adjusts_logits()) {
    begin_row(vocab);
    if (params.has_penalties()) add_history(request, vocab);
    add_logit_bias(params, vocab);
  }
  row.num_penalties = static_cast<std::int32_t>(penalties.size()) - row.penalty_begin;
  if (!request.allowed_tokens.empty()) {
    row.mask_word_begin = static_cast<std::int64_t>(mask_words.size());
    row.num_mask_words = static_cast<std::int32_t>(request.allowed_tokens.size());
    mask_words.insert(mask_words.end(), request.allowed_tokens.begin(), request.allowed_tokens.end());
  }
  rows.push_back(row);
}

void DeviceSamplePack::begin_row(std::int64_t vocab) {
  if (stamp_.size() != static_cast<std::size_t>(vocab)) {
    stamp_.assign(static_cast<std::size_t>(vocab), 0);
    entry_of_.assign(static_cast<std::size_t>(vocab), 0);
    epoch_ = 0;
  }
  if (++epoch_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    epoch_ = 1;
  }
}

void DeviceSamplePack::add_history(const SampleRequest& request, std::int64_t vocab) {
  const bool whole_history = request.params.repetition_penalty != 1.0f;
  for (std::size_t i = 0; i < request.tokens.size(); ++i) {
    const TokenId t = request.tokens[i];
    const bool generated = i >= static_cast<std::size_t>(request.num_prompt_tokens);
    if (t < 0 || t >= vocab || !(generated || whole_history)) continue;
    if (stamp_[t] != epoch_) {
      stamp_[t] = epoch_;
      entry_of_[t] = static_cast<std::int32_t>(penalties.size());
      penalties.push_back({.token = t, .num_generated = 0, .in_history = 1});
    }
    if (generated) ++penalties[entry_of_[t]].num_generated;
  }
}

void DeviceSamplePack::add_logit_bias(const SamplingParams& params, std::int64_t vocab) {
  for (const auto& [t, bias] : params.logit_bias) {
    if (t < 0 || t >= vocab) continue;
    if (stamp_[t] == epoch_) {
      penalties[entry_of_[t]].bias = bias;
    } else {
      stamp_[t] = epoch_;
      entry_of_[t] = static_cast<std::int32_t>(penalties.size());
      penalties.push_back({.token = t, .num_generated = 0, .bias = bias, .in_history = 0});
    }
  }
}

}  // namespace sluice::cuda
