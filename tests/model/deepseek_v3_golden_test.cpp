// The DeepSeek-V3 CPU reference against Hugging Face transformers (float32,
// eager attention and experts): logits after the prompt and after 31 greedy
// steps within 1e-4 and the same 32 greedy tokens, for tiny models covering
// q_lora_rank null and set, grouped routing, dense-then-MoE layers and YaRN
// past the original context. Prefill runs MLA decompressed, the greedy steps
// absorbed; several block sizes and chunkings; and one prefill of prompt and
// greedy tokens together must land on transformers' last logits too. And the
// model split over CPU ranks (EP 4, TP 2) against the same fixtures.
// Fixtures: tools/reference/golden_deepseek_v3.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/model/generate.h"
#include "sluice/model/model_runner.h"
#include "test_models.h"

namespace sluice {
namespace {

using testing::cpu_runner;
using testing::max_abs_diff;

constexpr float kMaxLogitError = 1e-4f;

testing::Golden load_fixture(const std::string& name) {
  return testing::load_deepseek_v3_golden(name, "golden-deepseek-v3-" + name);
}

class DeepseekV3GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepseekV3GoldenTest, MatchesTransformers) {
  const testing::Golden fixture = load_fixture(GetParam());
  ASSERT_FALSE(fixture.cases.empty());
  const testing::GoldenLayout layouts[] = {{16, 0}, {4, 37}, {1, 300}};
  float worst = testing::check_golden_generation(fixture, layouts, kMaxLogitError);
  // The last greedy position again, prefilled in one step (decompressed MLA).
  for (const testing::GoldenCase& c : fixture.cases) {
    std::vector<TokenId> all = c.prompt;
    all.insert(all.end(), c.greedy_tokens.begin(), c.greedy_tokens.end() - 1);
    auto backend = cpu_runner(fixture.model_dir, 16, static_cast<std::int32_t>(all.size() / 16 + 2));
    ASSERT_NE(backend, nullptr);
    auto result = generate_sequence(*backend, all, {.max_new_tokens = 1, .return_logits = true});
    ASSERT_TRUE(result.ok()) << result.error_message();
    EXPECT_EQ(result->tokens.front(), c.greedy_tokens.back());
    const float error = max_abs_diff(result->logits.front(), c.final_logits);
    EXPECT_LE(error, kMaxLogitError);
    worst = std::max(worst, error);
  }
  std::printf("%s: max |logit - transformers| = %.3g\n", GetParam().c_str(), worst);
  RecordProperty("max_abs_logit_error", std::to_string(worst));
}

// Split over CPU ranks (tensor_parallel_test.cpp compares against the
// unsharded run): whole experts over 4 ranks, and each expert's width over
// 2, against transformers directly, on the fixtures whose 4 heads split.
class DeepseekV3ShardedGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepseekV3ShardedGoldenTest, MatchesTransformers) {
  const testing::Golden fixture = load_fixture(GetParam());
  ASSERT_FALSE(fixture.cases.empty());
  float worst = 0.0f;
  for (const auto& [ranks, expert_parallel] : {std::pair{4, true}, std::pair{2, false}}) {
    for (const testing::GoldenCase& c : fixture.cases) {
      SCOPED_TRACE(::testing::Message() << (expert_parallel ? "EP " : "TP ") << ranks << " prompt of "
                                        << c.prompt.size());
      std::vector<std::unique_ptr<Ops>> ops;
      for (int r = 0; r < ranks; ++r) ops.push_back(make_cpu_ops({.num_threads = 1}));
      auto backend = make_tensor_parallel_model_runner(
          fixture.model_dir, std::move(ops),
          {.block_size_tokens = 16,
           .num_kv_blocks = static_cast<std::int32_t>((c.prompt.size() + 32) / 16 + 1),
           .enable_expert_parallel = expert_parallel});
      ASSERT_TRUE(backend.ok()) << backend.error_message();
      auto result = generate_sequence(**backend, c.prompt, {.max_new_tokens = 32, .return_logits = true});
      ASSERT_TRUE(result.ok()) << result.error_message();
      EXPECT_EQ(result->tokens, c.greedy_tokens);
      const float error = std::max(max_abs_diff(result->logits.front(), c.prompt_logits),
                                   max_abs_diff(result->logits.back(), c.final_logits));
      EXPECT_LE(error, kMaxLogitError);
      worst = std::max(worst, error);
    }
  }
  std::printf("%s sharded: max |logit - transformers| = %.3g\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(DeepseekV3, DeepseekV3ShardedGoldenTest, ::testing::Values("qlora_yarn", "grouped_v3like"));

INSTANTIATE_TEST_SUITE_P(DeepseekV3, DeepseekV3GoldenTest,
                         ::testing::Values("qlora_yarn", "no_qlora", "grouped_v3like"));

}  // namespace
}  // namespace sluice
