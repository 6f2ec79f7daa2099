// The reference sampler: greedy, seeded draws that follow the distribution,
// top-k/top-p/min-p truncation, penalties, the logit bias, logprobs.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "sluice/backend/cpu/sampler.h"

namespace sluice {
namespace {

SampleRequest request(SamplingParams params, std::int32_t index = 0) {
  return SampleRequest{.params = params, .generated_index = index};
}

const std::vector<float> kLogits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};

std::map<TokenId, double> frequencies(SamplingParams params, int num_draws) {
  std::map<TokenId, double> counts;
  for (int i = 0; i < num_draws; ++i) counts[sample_logits(kLogits, request(params, i)).token] += 1.0 / num_draws;
  return counts;
}

TEST(Sampler, GreedyIsArgmaxWithItsLogprob) {
  auto result = sample_logits(std::vector<float>{0.1f, 2.0f, -1.0f}, request({}));
  EXPECT_EQ(result.token, 1);
  const double log_sum = std::log(std::exp(0.1) + std::exp(2.0) + std::exp(-1.0));
  EXPECT_NEAR(result.logprob, 2.0 - log_sum, 1e-5);
}

TEST(Sampler, DrawsFollowTheDistribution) {
  auto freq = frequencies({.temperature = 1.0f, .seed = 42}, 20000);
  EXPECT_NEAR(freq[0], 0.5, 0.02);
  EXPECT_NEAR(freq[1], 0.3, 0.02);
  EXPECT_NEAR(freq[2], 0.2, 0.02);
}

TEST(Sampler, SeededDrawsAreReproducible) {
  SamplingParams params{.temperature = 1.0f, .seed = 7};
  std::vector<TokenId> first, second;
  for (int i = 0; i < 64; ++i) {
    first.push_back(sample_logits(kLogits, request(params, i)).token);
    second.push_back(sample_logits(kLogits, request(params, i)).token);
  }
  EXPECT_EQ(first, second);
  params.seed = 8;
  std::vector<TokenId> other;
  for (int i = 0; i < 64; ++i) other.push_back(sample_logits(kLogits, request(params, i)).token);
  EXPECT_NE(first, other);
}

TEST(Sampler, Truncation) {
  auto top_k = frequencies({.temperature = 1.0f, .top_k = 1, .seed = 1}, 200);
  EXPECT_DOUBLE_EQ(top_k[0], 1.0);
  auto top_p = frequencies({.temperature = 1.0f, .top_p = 0.6f, .seed = 1}, 4000);
  EXPECT_EQ(top_p.count(2), 0u);
  EXPECT_NEAR(top_p[0], 0.5 / 0.8, 0.03);
  auto min_p = frequencies({.temperature = 1.0f, .min_p = 0.5f, .seed = 1}, 4000);
  EXPECT_EQ(min_p.count(2), 0u);
  // Low temperature sharpens towards the argmax.
  auto cold = frequencies({.temperature = 0.1f, .seed = 3}, 2000);
  EXPECT_GT(cold[0], 0.98);
}

TEST(Sampler, Penalties) {
  const std::vector<float> logits = {2.0f, 1.9f, -1.0f};
  const std::vector<TokenId> history = {5, 0};  // prompt [5], generated [0]
  SampleRequest req{.params = {.repetition_penalty = 2.0f}, .tokens = history, .num_prompt_tokens = 1};
  EXPECT_EQ(sample_logits(logits, req).token, 1);  // 2.0 / 2 < 1.9
  req.params = {.presence_penalty = 0.5f};
  EXPECT_EQ(sample_logits(logits, req).token, 1);
  req.params = {.frequency_penalty = 0.05f};
  EXPECT_EQ(sample_logits(logits, req).token, 0);  // 2.0 - 0.05 still wins
  req.num_prompt_tokens = 2;  // token 0 is now a prompt token: presence ignores it
  req.params = {.presence_penalty = 0.5f};
  EXPECT_EQ(sample_logits(logits, req).token, 0);
}

TEST(Sampler, LogitBiasMovesTheChoiceAndTheLogprobs) {
  const std::vector<float> logits = {2.0f, 1.9f, -1.0f};
  SamplingParams params{.num_top_logprobs = 3, .logit_bias = {{0, -100.0f}, {2, 3.5f}}};
  const SampleResult biased = sample_logits(logits, request(params));
  EXPECT_EQ(biased.token, 2);  // -1 + 3.5 beats 1.9; token 0 at -98 is out of reach
  const double log_sum = std::log(std::exp(-98.0) + std::exp(1.9) + std::exp(2.5));
  EXPECT_NEAR(biased.logprob, 2.5 - log_sum, 1e-5);  // the logprobs are of the biased distribution
  ASSERT_EQ(biased.top_logprobs.size(), 3u);
  EXPECT_EQ(biased.top_logprobs[2].token, 0);
  EXPECT_NEAR(biased.top_logprobs[2].logprob, -98.0 - log_sum, 1e-4);
  // A sampled row draws from the biased distribution: token 0 never comes.
  params.temperature = 1.0f;
  params.num_top_logprobs = 0;
  for (int i = 0; i < 200; ++i) EXPECT_NE(sample_logits(logits, request(params, i)).token, 0);
}

TEST(Sampler, LogitBiasComesBeforeTheRepetitionPenalty) {
  // vLLM's order: the bias, then the penalty scales the biased logit. Token
  // 0 (in the history) is 1 + 1 = 2, halved to 1: token 1's 1.4 wins. The
  // other order (1 / 2 + 1 = 1.5) would pick token 0.
  const std::vector<float> logits = {1.0f, 1.4f};
  const std::vector<TokenId> history = {0};
  const SampleRequest req{.params = {.repetition_penalty = 2.0f, .logit_bias = {{0, 1.0f}}},
                          .tokens = history,
                          .num_prompt_tokens = 1};
  EXPECT_EQ(sample_logits(logits, req).token, 1);
}

TEST(Sampler, TopLogprobsAreSortedAndNormalised) {
  auto result = sample_logits(kLogits, request({.num_top_logprobs = 2}));
  ASSERT_EQ(result.top_logprobs.size(), 2u);
  EXPECT_EQ(result.top_logprobs[0].token, 0);
  EXPECT_EQ(result.top_logprobs[1].token, 1);
  EXPECT_NEAR(result.top_logprobs[0].logprob, std::log(0.5), 1e-5);
  EXPECT_NEAR(result.top_logprobs[1].logprob, std::log(0.3), 1e-5);
}

TEST(SamplingParams, ValidateNamesTheField) {
  for (auto [params, field] : {std::pair{SamplingParams{.temperature = -1.0f}, "temperature"},
                               {SamplingParams{.top_p = 0.0f}, "top_p"},
                               {SamplingParams{.min_p = 1.5f}, "min_p"},
                               {SamplingParams{.top_k = -2}, "top_k"},
                               {SamplingParams{.presence_penalty = 3.0f}, "presence_penalty"},
                               {SamplingParams{.repetition_penalty = 0.0f}, "repetition_penalty"},
                               {SamplingParams{.logit_bias = {{3, 101.0f}}}, "logit_bias"},
                               {SamplingParams{.logit_bias = {{-1, 1.0f}}}, "logit_bias"},
                               {SamplingParams{.logit_bias = {{4, 1.0f}, {4, 2.0f}}}, "logit_bias"}}) {
    auto status = params.validate();
    ASSERT_FALSE(status.ok()) << field;
    EXPECT_NE(status.error().message.find(field), std::string::npos) << status.error().message;
  }
  EXPECT_TRUE(SamplingParams{}.validate().ok());
}

}  // namespace
}  // namespace sluice
