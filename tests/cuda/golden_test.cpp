// The CUDA backend against the Hugging Face goldens that the CPU backend
// passes (tests/fixtures/golden_*.json): the same 32 greedy tokens, and logits
// within 1e-2 relative error (bf16 activations), for every architecture, one
// sequence at a time with chunked prefill and all prompts batched together.
#include <gtest/gtest.h>

#include <cmath>

#include "../model/test_models.h"
#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/common/io.h"
#include "sluice/model/generate.h"
#include "sluice/model/model_runner.h"

namespace sluice {
namespace {

constexpr double kMaxRelativeLogitError = 1e-2;

struct GoldenCase {
  std::vector<TokenId> prompt;
  std::vector<float> prompt_logits;
  std::vector<TokenId> greedy_tokens;
  std::vector<float> final_logits;
};

struct Golden {
  std::string model_dir;
  std::vector<GoldenCase> cases;
};

Golden load_golden(const std::string& arch) {
  auto text = read_file(std::string(SLUICE_SOURCE_DIR) + "/tests/fixtures/golden_" + arch + ".json");
  EXPECT_TRUE(text.ok()) << text.error_message();
  const auto fixture = nlohmann::json::parse(text.value());
  Golden golden;
  golden.model_dir = testing::scratch_dir("cuda-golden-" + arch);
  auto status = make_model(testing::make_model_options(fixture.at("make_model"), golden.model_dir));
  EXPECT_TRUE(status.ok()) << status.error_message();
  for (const auto& c : fixture.at("cases"))
    golden.cases.push_back({c.at("prompt"), c.at("prompt_logits"), c.at("greedy_tokens"), c.at("final_logits")});
  return golden;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

std::unique_ptr<Backend> cuda_runner(const std::string& dir, std::int32_t block_size, std::int32_t num_blocks) {
  auto ops = make_cuda_ops({.scratch_bytes = 64LL << 20});
  EXPECT_TRUE(ops.ok()) << ops.error_message();
  auto backend = make_model_runner(dir, std::move(ops).value(),
                                   {.block_size_tokens = block_size, .num_kv_blocks = num_blocks});
  EXPECT_TRUE(backend.ok()) << backend.error_message();
  return std::move(backend).value();
}

class CudaGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGoldenTest, SingleSequenceMatchesTransformers) {
  const Golden golden = load_golden(GetParam());
  struct Layout {
    std::int32_t block_size_tokens, prefill_chunk_tokens;
  };
  for (Layout layout : {Layout{16, 0}, Layout{4, 5}, Layout{1, 7}}) {
    auto backend = cuda_runner(golden.model_dir, layout.block_size_tokens, 128 / layout.block_size_tokens * 4);
    for (const GoldenCase& c : golden.cases) {
      SCOPED_TRACE(::testing::Message() << "block " << layout.block_size_tokens << " chunk "
                                        << layout.prefill_chunk_tokens << " prompt of " << c.prompt.size());
      auto result = generate_sequence(*backend, c.prompt,
                                      {.max_new_tokens = 32,
                                       .prefill_chunk_tokens = layout.prefill_chunk_tokens,
                                       .return_logits = true});
      ASSERT_TRUE(result.ok()) << result.error_message();
      EXPECT_EQ(result->tokens, c.greedy_tokens);
      EXPECT_LE(relative_error(result->logits.front(), c.prompt_logits), kMaxRelativeLogitError);
      EXPECT_LE(relative_error(result->logits.back(), c.final_logits), kMaxRelativeLogitError);
    }
  }
}

TEST_P(CudaGoldenTest, BatchedSequencesMatchTransformers) {
  const Golden golden = load_golden(GetParam());
  constexpr std::int32_t kBlockSize = 8;
  auto backend = cuda_runner(golden.model_dir, kBlockSize, 64);
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
        EXPECT_LE(relative_error(out.logits, golden.cases[i].prompt_logits), kMaxRelativeLogitError);
      }
      if (step == 31) {
        EXPECT_LE(relative_error(out.logits, golden.cases[i].final_logits), kMaxRelativeLogitError);
      }
      computed[i] = static_cast<std::int32_t>(tokens[i].size());
      tokens[i].push_back(*out.token);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, CudaGoldenTest, ::testing::Values("llama", "mistral", "qwen2", "qwen3"));

}  // namespace
}  // namespace sluice
