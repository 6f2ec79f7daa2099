#include "sluice/backend/cpu/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "sluice/common/rng.h"

namespace sluice {
namespace {

// presence/frequency penalties count generated tokens only (OpenAI semantics);
// the repetition penalty covers prompt and output (the Hugging Face / vLLM one).
void apply_penalties(std::vector<float>& logits, const SampleRequest& request) {
  const SamplingParams& params = request.params;
  if (!params.has_penalties()) return;
  std::unordered_map<TokenId, int> output_counts;
  for (std::size_t i = static_cast<std::size_t>(request.num_prompt_tokens); i < request.tokens.size(); ++i)
    ++output_counts[request.tokens[i]];
  if (params.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size(), false);
    for (TokenId t : request.tokens)
      if (t >= 0 && static_cast<std::size_t>(t) < logits.size()) seen[t] = true;
    for (std::size_t t = 0; t < logits.size(); ++t) {
      if (!seen[t]) continue;
      logits[t] = logits[t] > 0 ? logits[t] / params.repetition_penalty : logits[t] * params.repetition_penalty;
    }
  }
  for (const auto& [token, count] : output_counts) {
    if (token < 0 || static_cast<std::size_t>(token) >= logits.size()) continue;
    logits[token] -= params.frequency_penalty * static_cast<float>(count) + params.presence_penalty;
  }
}

// Structured output: a token outside the allowed set gets probability 0, so
// greedy, sampling and the reported logprobs all see the constrained
// distribution.
void apply_allowed_tokens(std::vector<float>& logits, std::span<const std::uint64_t> allowed) {
  if (allowed.empty()) return;
  for (std::size_t t = 0; t < logits.size(); ++t)
    if (!token_mask_allows(allowed, static_cast<TokenId>(t))) logits[t] = -std::numeric_limits<float>::infinity();
}

std::vector<float> log_softmax(const std::vector<float>& logits) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_logit));
  const float log_sum = static_cast<float>(std::log(sum)) + max_logit;
  std::vector<float> out(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_sum;
  return out;
}

TokenId argmax(const std::vector<float>& values) {
  return static_cast<TokenId>(std::max_element(values.begin(), values.end()) - values.begin());
}

// Draws from softmax(logits / T) restricted by top-k, top-p and min-p.
TokenId draw(const std::vector<float>& logits, const SampleRequest& request) {
  const SamplingParams& params = request.params;
  std::vector<TokenId> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // Highest first; ties by lower id, so the order is total and portable.
  std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) { return logits[a] > logits[b]; });
  std::size_t keep = order.size();
  if (params.top_k > 0) keep = std::min<std::size_t>(keep, static_cast<std::size_t>(params.top_k));
  const double max_scaled = logits[order[0]] / params.temperature;
  std::vector<double> probs(keep);
  double total = 0.0;
  for (std::size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp(logits[order[i]] / params.temperature - max_scaled);
    total += probs[i];
  }
  for (double& p : probs) p /= total;
  if (params.min_p > 0.0f) {
    const double threshold = params.min_p * probs[0];
    std::size_t kept = 1;
    while (kept < keep && probs[kept] >= threshold) ++kept;
    keep = kept;
  }
  if (params.top_p < 1.0f) {
    double cumulative = 0.0;
    std::size_t kept = 0;
    while (kept < keep) {
      cumulative += probs[kept++];
      if (cumulative >= params.top_p) break;
    }
    keep = kept;
  }
  double mass = 0.0;
  for (std::size_t i = 0; i < keep; ++i) mass += probs[i];
  const double target = uniform_from(params.seed, static_cast<std::uint64_t>(request.generated_index)) * mass;
  double cumulative = 0.0;
  for (std::size_t i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (target < cumulative) return order[i];
  }
  return order[keep - 1];
}

}  // namespace

SampleResult sample_logits(std::span<const float> raw_logits, const SampleRequest& request) {
  std::vector<float> logits(raw_logits.begin(), raw_logits.end());
  apply_penalties(logits, request);
  apply_allowed_tokens(logits, request.allowed_tokens);
  SampleResult result;
  result.token = request.params.is_greedy() ? argmax(logits) : draw(logits, request);
  const std::vector<float> logprobs = log_softmax(logits);
  result.logprob = logprobs[result.token];
  if (request.params.num_top_logprobs > 0) {
    std::vector<TokenId> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    const auto n = std::min<std::size_t>(order.size(), static_cast<std::size_t>(request.params.num_top_logprobs));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                      [&](TokenId a, TokenId b) { return logprobs[a] > logprobs[b] || (logprobs[a] == logprobs[b] && a < b); });
    for (std::size_t i = 0; i < n; ++i)
      if (std::isfinite(logprobs[order[i]])) result.top_logprobs.push_back({order[i], logprobs[order[i]]});
  }
  if (request.return_logits) result.logits.assign(raw_logits.begin(), raw_logits.end());
  return result;
}

}  // namespace sluice
