// The CPU backend against Hugging Face transformers (float32): logits after the
// prompt and after 31 greedy steps within 1e-4, and the same 32 greedy tokens,
// for every architecture; with several block sizes, chunked prefill, and all
// prompts batched together. Fixtures: tools/reference/golden.py.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/common/io.h"
#include "sluice/model/generate.h"
#include "sluice/model/model_runner.h"
#include "test_models.h"

namespace sluice {
namespace {

// Both sides compute in float32 and agree to about 1e-6; 1e-4 leaves margin
// for summation order while catching any real error.
constexpr float kMaxLogitError = 1e-4f;

using testing::Golden;
using testing::GoldenCase;
using testing::cpu_runner;
using testing::max_abs_diff;

Golden load_golden(const std::string& arch) { return testing::load_golden(arch, "golden-" + arch); }



struct Layout {
  std::int32_t block_size_tokens;
  std::int32_t prefill_chunk_tokens;  // 0 = whole prompt
};

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, SingleSequenceMatchesTransformers) {
  const Golden golden = load_golden(GetParam());
  for (Layout layout : {Layout{16, 0}, Layout{4, 5}, Layout{1, 7}}) {
    auto backend = cpu_runner(golden.model_dir, layout.block_size_tokens,
                              testing::num_blocks_for(golden, layout.block_size_tokens));
    for (const GoldenCase& c : golden.cases) {
      SCOPED_TRACE(::testing::Message() << "block " << layout.block_size_tokens << " chunk "
                                        << layout.prefill_chunk_tokens << " prompt of " << c.prompt.size());
      auto result = generate_sequence(*backend, c.prompt,
                                      {.max_new_tokens = 32,
                                       .prefill_chunk_tokens = layout.prefill_chunk_tokens,
                                       .return_logits = true});
      ASSERT_TRUE(result.ok()) << result.error_message();
      EXPECT_EQ(result->tokens, c.greedy_tokens);
      EXPECT_LE(max_abs_diff(result->logits.front(), c.prompt_logits), kMaxLogitError);
      EXPECT_LE(max_abs_diff(result->logits.back(), c.final_logits), kMaxLogitError);
    }
  }
}

// All prompts prefill in one step, then decode together: rows of different
// sequences must not see each other's KV.
TEST_P(GoldenTest, BatchedSequencesMatchTransformers) {
  const Golden golden = load_golden(GetParam());
  constexpr std::int32_t kBlockSize = 8;
  auto backend = cpu_runner(golden.model_dir, kBlockSize, testing::num_blocks_for(golden, kBlockSize));
  const std::size_t n = golden.cases.size();
  std::vector<std::vector<TokenId>> tokens(n);
  std::vector<std::vector<BlockId>> tables(n);
  std::vector<std::int32_t> computed(n, 0);
  BlockId next_block = 0;
  for (std::size_t i = 0; i < n; ++i) {
    tokens[i] = golden.cases[i].prompt;
    const std::size_t blocks = (tokens[i].size() + 32 + kBlockSize - 1) / kBlockSize;
    for (std::size_t b = 0; b < blocks; ++b) tables[i].push_back(next_block++);
  }
  for (int step = 0; step < 32; ++step) {
    Batch batch;
    for (std::size_t i = 0; i < n; ++i)
      batch.sequences.push_back({.seq_id = i,
                                 .tokens = tokens[i],
                                 .num_prompt_tokens = static_cast<std::int32_t>(golden.cases[i].prompt.size()),
                                 .num_computed_tokens = computed[i],
                                 .num_new_tokens = static_cast<std::int32_t>(tokens[i].size()) - computed[i],
                                 .block_table = tables[i],
                                 .sample = true,
                                 .return_logits = step == 0 || step == 31});
    auto output = backend->execute(batch);
    ASSERT_TRUE(output.ok()) << output.error_message();
    for (std::size_t i = 0; i < n; ++i) {
      const SequenceOutput& out = output->sequences[i];
      ASSERT_TRUE(out.token.has_value());
      EXPECT_EQ(*out.token, golden.cases[i].greedy_tokens[step]) << "sequence " << i << " step " << step;
      if (step == 0) {
        EXPECT_LE(max_abs_diff(out.logits, golden.cases[i].prompt_logits), kMaxLogitError);
      }
      if (step == 31) {
        EXPECT_LE(max_abs_diff(out.logits, golden.cases[i].final_logits), kMaxLogitError);
      }
      computed[i] = static_cast<std::int32_t>(tokens[i].size());
      tokens[i].push_back(*out.token);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, GoldenTest, ::testing::Values("llama", "mistral", "qwen2", "qwen3"));

}  // namespace
}  // namespace sluice
