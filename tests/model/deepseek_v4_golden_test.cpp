// The DeepSeek-V4 CPU reference against Hugging Face transformers (float32,
// eager attention and experts): logits after the prompt and after 31 greedy
// steps within 1e-4 and the same 32 greedy tokens, for tiny models covering
// the three attention kinds, hash and top-k MoE layers, the indexer's top-k,
// YaRN past the original length, SwiGLU clamps and the real 4 / 128 rates.
// The greedy steps run one token at a time, held to transformers' cached
// steps; the last greedy position is also reached by one whole prefill and by
// chunks, held to transformers' uncached run of the whole sequence.
// Fixtures: tools/reference/golden_deepseek_v4.py, run on the GPU machine's
// CPU (tests/fixtures/README.md); a missing fixture is a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "sluice/common/io.h"
#include "sluice/model/deepseek_v4.h"
#include "test_models.h"

namespace sluice {
namespace {

using testing::max_abs_diff;

constexpr float kMaxLogitError = 1e-4f;

TokenId argmax(const std::vector<float>& logits) {
  return static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Runs `tokens` through a fresh sequence in chunks of `chunk_tokens`; the logits after the last.
std::vector<float> run_chunked(const DeepseekV4Reference& model, const std::vector<TokenId>& tokens,
                               std::size_t chunk_tokens) {
  auto sequence = model.start_sequence();
  std::vector<float> logits;
  for (std::size_t begin = 0; begin < tokens.size(); begin += chunk_tokens) {
    const std::size_t count = std::min(chunk_tokens, tokens.size() - begin);
    auto result = model.append(sequence, std::span(tokens).subspan(begin, count));
    EXPECT_TRUE(result.ok()) << result.error_message();
    if (!result.ok()) return {};
    logits = std::move(*result);
  }
  return logits;
}

class DeepseekV4GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepseekV4GoldenTest, MatchesTransformers) {
  const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/fixtures/golden_deepseek_v4_" + GetParam() + ".json";
  auto text = read_file(path);
  ASSERT_TRUE(text.ok()) << text.error_message();
  const auto fixture = nlohmann::json::parse(text.value());
  const std::string dir = testing::scratch_dir("golden-deepseek-v4-" + GetParam());
  auto made = make_model(testing::make_model_options_from_flags(fixture.at("make_model"), dir));
  ASSERT_TRUE(made.ok()) << made.error_message();
  auto loaded = testing::load_deepseek_v4_on_cpu(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.error_message();
  const DeepseekV4Reference& model = *(*loaded)->model;

  float worst = 0.0f;
  for (const auto& c : fixture.at("cases")) {
    const testing::GoldenCase golden{c.at("prompt"), c.at("prompt_logits"), c.at("greedy_tokens"),
                                     c.at("final_logits")};
    SCOPED_TRACE(::testing::Message() << "prompt of " << golden.prompt.size());
    auto sequence = model.start_sequence();
    auto logits = model.append(sequence, golden.prompt);
    ASSERT_TRUE(logits.ok()) << logits.error_message();
    const float prompt_error = max_abs_diff(*logits, golden.prompt_logits);
    EXPECT_LE(prompt_error, kMaxLogitError);
    std::vector<TokenId> tokens;
    std::vector<float> last = *logits;
    for (std::size_t step = 0; step < golden.greedy_tokens.size(); ++step) {
      tokens.push_back(argmax(last));
      if (step + 1 == golden.greedy_tokens.size()) break;
      auto next = model.append(sequence, std::span(&tokens.back(), 1));
      ASSERT_TRUE(next.ok()) << next.error_message();
      last = std::move(*next);
    }
    EXPECT_EQ(tokens, golden.greedy_tokens);
    const float final_error = max_abs_diff(last, golden.final_logits);
    EXPECT_LE(final_error, kMaxLogitError);
    worst = std::max({worst, prompt_error, final_error});

    // The same last position by one prefill, and by chunks that split windows:
    // against transformers' uncached run of the whole sequence.
    const std::vector<float> uncached = c.at("final_logits_uncached");
    std::vector<TokenId> all = golden.prompt;
    all.insert(all.end(), golden.greedy_tokens.begin(), golden.greedy_tokens.end() - 1);
    for (std::size_t chunk : {all.size(), std::size_t{37}}) {
      const float error = max_abs_diff(run_chunked(model, all, chunk), uncached);
      EXPECT_LE(error, kMaxLogitError) << "chunks of " << chunk;
      worst = std::max(worst, error);
    }
  }
  std::printf("%s: max |logit - transformers| = %.3g\n", GetParam().c_str(), worst);
  RecordProperty("max_abs_logit_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(DeepseekV4, DeepseekV4GoldenTest, ::testing::Values("all_kinds", "yarn_clamped", "flash_rates"));

}  // namespace
}  // namespace sluice
