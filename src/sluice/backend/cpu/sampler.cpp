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

// OpenAI's logit_bias, added before the penalties as vLLM does (a repetition
// penalty then scales the biased logit).
void apply_logit_bias(std::vector<float>& logits, const SamplingParams& params) {
  for (const auto& [token, bias] : params.logit_bias)
    if (token >= 0 && static_cast<std::size_t>(token) < logits.size()) logits[token] += bias;
}

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

// exp((logit - max) / temperature) for every token, in float (the sums are
// in double): the unnormalised distribution, with the top token at 1.
std::vector<float> weights(const std::vector<float>& logits, float max_logit, float temperature) {
  std::vector<float> w(logits.size());
  const float inverse = 1.0f / temperature;
  for (std::size_t t = 0; t < logits.size(); ++t) w[t] = std::exp((logits[t] - max_logit) * inverse);
  return w;
}

double sum_of(const std::vector<float>& values) {
  double sum = 0.0;
  for (float v : values) sum += v;
  return sum;
}

TokenId argmax(const std::vector<float>& values) {
  return static_cast<TokenId>(std::max_element(values.begin(), values.end()) - values.begin());
}

// Highest logit first; ties by lower id, so the order is total and portable.
struct ByLogitDescending {
  const std::vector<float>& logits;
  bool operator()(TokenId a, TokenId b) const { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); }
};

// Draws from softmax(logits / T) restricted by top-k, min-p and top-p, without
// sorting the vocabulary: top-k is a selection, min-p a filter (its threshold
// is relative to the top token, whose weight is 1), and top-p sorts only as
// many of the best tokens as it needs (256, then 4x more, until the kept mass
// is reached).
TokenId draw(const std::vector<float>& logits, const std::vector<float>& weight, const SampleRequest& request) {
  const SamplingParams& params = request.params;
  const ByLogitDescending before{logits};
  std::vector<TokenId> kept(logits.size());
  std::iota(kept.begin(), kept.end(), 0);
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < kept.size()) {
    std::nth_element(kept.begin(), kept.begin() + params.top_k, kept.end(), before);
    kept.resize(static_cast<std::size_t>(params.top_k));
    std::sort(kept.begin(), kept.end());  // back to id order: the draw walks a canonical order
  }
  // top-p's mass is a share of the top-k distribution, before min-p (as in
  // Hugging Face, where min-p is the last warper).
  double total = 0.0;
  for (TokenId t : kept) total += weight[t];
  if (params.min_p > 0.0f) std::erase_if(kept, [&](TokenId t) { return weight[t] < params.min_p; });
  if (params.top_p < 1.0f) {
    const double target_mass = static_cast<double>(params.top_p) * total;
    std::size_t num_sorted = std::min<std::size_t>(256, kept.size());
    while (true) {
      std::partial_sort(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(num_sorted), kept.end(), before);
      double cumulative = 0.0;
      std::size_t n = 0;
      while (n < num_sorted && cumulative < target_mass) cumulative += weight[kept[n++]];
      if (cumulative >= target_mass || num_sorted == kept.size()) {
        kept.resize(std::max<std::size_t>(n, 1));
        break;
      }
      num_sorted = std::min(kept.size(), num_sorted * 4);
    }
  }
  double mass = 0.0;
  for (TokenId t : kept) mass += weight[t];
  const double target = uniform_from(params.seed, static_cast<std::uint64_t>(request.generated_index)) * mass;
  double cumulative = 0.0;
  for (TokenId t : kept) {
    cumulative += weight[t];
    if (target < cumulative) return t;
  }
  return kept.back();
}

}  // namespace

SampleResult sample_logits(std::span<const float> raw_logits, const SampleRequest& request) {
  std::vector<float> logits(raw_logits.begin(), raw_logits.end());
  apply_logit_bias(logits, request.params);
  apply_penalties(logits, request);
  apply_allowed_tokens(logits, request.allowed_tokens);
  SampleResult result;
  // Logprobs are of the distribution at temperature 1 (after the bias, the
  // penalties and the structured-output mask), as OpenAI reports them.
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  const std::vector<float> unit_weights = weights(logits, max_logit, 1.0f);
  if (request.params.is_greedy()) {
    result.token = argmax(logits);
  } else {
    result.token = draw(logits,
                        request.params.temperature == 1.0f ? unit_weights
                                                           : weights(logits, max_logit, request.params.temperature),
                        request);
  }
  const float log_sum = static_cast<float>(std::log(sum_of(unit_weights))) + max_logit;
  result.logprob = logits[result.token] - log_sum;
  if (request.params.num_top_logprobs > 0) {
    std::vector<TokenId> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    const auto n = std::min<std::size_t>(order.size(), static_cast<std::size_t>(request.params.num_top_logprobs));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                      ByLogitDescending{logits});
    for (std::size_t i = 0; i < n; ++i)
      if (std::isfinite(logits[order[i]])) result.top_logprobs.push_back({order[i], logits[order[i]] - log_sum});
  }
  if (request.return_logits) result.logits.assign(raw_logits.begin(), raw_logits.end());
  return result;
}

}  // namespace sluice
