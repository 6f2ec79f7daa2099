// The DeepSeek-V3 CPU reference against itself where the answer is known
// without an outside oracle: absorbed-form decode equals decompressed-form
// prefill, chunked prefill and block sizes change nothing, sequences batched
// together do not see each other, the KV pool is sized by the latent, and MTP
// layers are skipped with a log line. transformers is the oracle in
// deepseek_v3_golden_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/common/io.h"
#include "sluice/model/generate.h"
#include "sluice/model/model_runner.h"
#include "test_models.h"

namespace sluice {
namespace {

using testing::cpu_runner;
using testing::max_abs_diff;

using testing::deepseek_v3_model_options;
using testing::make_deepseek_v3_model;

std::vector<TokenId> prompt_of(std::int32_t length, std::int32_t vocab) {
  std::vector<TokenId> ids;
  std::uint64_t state = 99;
  for (std::int32_t i = 0; i < length; ++i) {
    state = (state * 1103515245 + 12345) % (1u << 31);
    ids.push_back(static_cast<TokenId>(state % static_cast<std::uint64_t>(vocab)));
  }
  return ids;
}


// Decode steps run the absorbed form; a prefill of the same tokens runs the
// decompressed form. Both are the same attention.
TEST(DeepseekV3Cpu, AbsorbedDecodeEqualsDecompressedPrefill) {
  for (const char* name : {"qlora_yarn", "no_qlora"}) {
    SCOPED_TRACE(name);
    const std::string dir = make_deepseek_v3_model(name, std::string("ds-absorbed-") + name);
    const std::vector<TokenId> prompt = prompt_of(290, 512);  // past qlora_yarn's original 256 positions
    auto decode = cpu_runner(dir, 16, 64);
    auto generated = generate_sequence(*decode, prompt, {.max_new_tokens = 12, .return_logits = true});
    ASSERT_TRUE(generated.ok()) << generated.error_message();
    std::vector<TokenId> all = prompt;
    all.insert(all.end(), generated->tokens.begin(), generated->tokens.end() - 1);
    auto prefill = cpu_runner(dir, 16, 64);
    auto once = generate_sequence(*prefill, all, {.max_new_tokens = 1, .return_logits = true});
    ASSERT_TRUE(once.ok()) << once.error_message();
    EXPECT_EQ(once->tokens.front(), generated->tokens.back());
    EXPECT_LE(max_abs_diff(once->logits.front(), generated->logits.back()), 1e-4f);
  }
}

TEST(DeepseekV3Cpu, ChunksAndBlockSizesChangeNothing) {
  const std::string dir = make_deepseek_v3_model("grouped_v3like", "ds-chunks");
  const std::vector<TokenId> prompt = prompt_of(200, 512);
  auto reference_backend = cpu_runner(dir, 16, 16);
  auto reference = generate_sequence(*reference_backend, prompt, {.max_new_tokens = 8, .return_logits = true});
  ASSERT_TRUE(reference.ok()) << reference.error_message();
  struct Layout {
    std::int32_t block_size_tokens, prefill_chunk_tokens;
  };
  for (Layout layout : {Layout{5, 37}, Layout{1, 64}, Layout{32, 1}}) {
    SCOPED_TRACE(::testing::Message() << "block " << layout.block_size_tokens << " chunk "
                                      << layout.prefill_chunk_tokens);
    auto backend = cpu_runner(dir, layout.block_size_tokens, 256 / layout.block_size_tokens + 8);
    auto result = generate_sequence(*backend, prompt,
                                    {.max_new_tokens = 8,
                                     .prefill_chunk_tokens = layout.prefill_chunk_tokens,
                                     .return_logits = true});
    ASSERT_TRUE(result.ok()) << result.error_message();
    EXPECT_EQ(result->tokens, reference->tokens);
    for (std::size_t i = 0; i < result->logits.size(); ++i)
      EXPECT_LE(max_abs_diff(result->logits[i], reference->logits[i]), 1e-4f) << "token " << i;
  }
}

// Two prompts prefilled in one step, then decoded together: each sees only
// its own latents, and the MoE routes each row alone.
TEST(DeepseekV3Cpu, BatchedSequencesMatchSingleRuns) {
  const std::string dir = make_deepseek_v3_model("qlora_yarn", "ds-batched");
  const std::vector<std::vector<TokenId>> prompts = {prompt_of(40, 512), prompt_of(7, 512)};
  std::vector<GenerateResult> single;
  for (const auto& prompt : prompts) {
    auto backend = cpu_runner(dir, 8, 32);
    auto result = generate_sequence(*backend, prompt, {.max_new_tokens = 6, .return_logits = true});
    ASSERT_TRUE(result.ok()) << result.error_message();
    single.push_back(*result);
  }
  auto backend = cpu_runner(dir, 8, 32);
  std::vector<std::vector<TokenId>> tokens = prompts;
  const std::vector<std::vector<BlockId>> tables = {{0, 1, 2, 3, 4, 5}, {6, 7}};
  std::vector<std::int32_t> computed = {0, 0};
  for (int step = 0; step < 6; ++step) {
    Batch batch;
    for (std::size_t i = 0; i < 2; ++i)
      batch.sequences.push_back({.seq_id = i,
                                 .tokens = tokens[i],
                                 .num_prompt_tokens = static_cast<std::int32_t>(prompts[i].size()),
                                 .num_computed_tokens = computed[i],
                                 .num_new_tokens = static_cast<std::int32_t>(tokens[i].size()) - computed[i],
                                 .block_table = tables[i],
                                 .sample = true,
                                 .return_logits = true});
    auto output = backend->execute(batch);
    ASSERT_TRUE(output.ok()) << output.error_message();
    for (std::size_t i = 0; i < 2; ++i) {
      const SequenceOutput& out = output->sequences[i];
      EXPECT_EQ(*out.token, single[i].tokens[step]) << "sequence " << i << " step " << step;
      EXPECT_LE(max_abs_diff(out.logits, single[i].logits[step]), 1e-4f) << "sequence " << i << " step " << step;
      computed[i] = static_cast<std::int32_t>(tokens[i].size());
      tokens[i].push_back(*out.token);
    }
  }
}

// The pool holds kv_lora_rank + qk_rope_head_dim f32 values per token per
// layer, not a key and a value per head.
TEST(DeepseekV3Cpu, KvPoolIsSizedByTheLatent) {
  const std::string dir = make_deepseek_v3_model("qlora_yarn", "ds-kv-pool");
  const std::int64_t bytes_per_block = 3 /*layers*/ * 16 /*tokens*/ * (32 + 8) /*latent + rope*/ * 4 /*f32*/;
  auto backend = make_model_runner(dir, make_cpu_ops({.num_threads = 1}),
                                   {.block_size_tokens = 16, .kv_cache_bytes = 100 * bytes_per_block + 5});
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  EXPECT_EQ((*backend)->info().num_kv_blocks, 100);
}

void set_config_field(const std::string& dir, const char* key, const nlohmann::json& value) {
  auto config = nlohmann::json::parse(read_file(dir + "/config.json").value());
  config[key] = value;
  ASSERT_TRUE(write_file(dir + "/config.json", config.dump(2)).ok());
}

TEST(DeepseekV3Cpu, MtpLayersAreSkippedOthersAreErrors) {
  const std::string dir = testing::scratch_dir("ds-mtp");
  MakeModelOptions o = deepseek_v3_model_options("no_qlora", dir);
  o.deepseek_v3.mtp_layers = 1;
  ASSERT_TRUE(make_model(o).ok());
  auto loaded = make_model_runner(dir, make_cpu_ops({.num_threads = 1}), {.num_kv_blocks = 4});
  EXPECT_TRUE(loaded.ok()) << loaded.error_message();
  // The same tensors without the config saying what they are: not silently dropped.
  set_config_field(dir, "num_nextn_predict_layers", 0);
  auto rejected = make_model_runner(dir, make_cpu_ops({.num_threads = 1}), {.num_kv_blocks = 4});
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.error_message().find("model.layers.2."), std::string::npos) << rejected.error_message();
}

// An FP8 checkpoint runs on the CPU through its dequantized weights: it
// computes exactly what the f32 checkpoint that numpy dequantizes from the
// block-scale definition computes (tests/model/fp8_reference.py).
TEST(DeepseekV3Cpu, Fp8CheckpointEqualsItsNumpyDequantization) {
  const std::string fp8_dir = testing::scratch_dir("ds-fp8"), f32_dir = testing::scratch_dir("ds-fp8-numpy");
  MakeModelOptions o = deepseek_v3_model_options("grouped_v3like", fp8_dir);
  o.dtype = DType::f8_e4m3;
  o.hidden_size = 160;  // partial 128-blocks
  ASSERT_TRUE(make_model(o).ok());
  const std::string python = "/usr/bin/python3";
  ASSERT_EQ(std::system((python + " -c 'import numpy' 2>/dev/null").c_str()), 0)
      << "this oracle needs Debian's python3-numpy at " << python;
  const std::string command = python + " " + SLUICE_SOURCE_DIR + "/tests/model/fp8_reference.py --checkpoint " +
                              fp8_dir + " " + f32_dir;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const std::vector<TokenId> prompt = prompt_of(30, 512);
  auto fp8 = cpu_runner(fp8_dir, 16, 8);
  auto f32 = cpu_runner(f32_dir, 16, 8);
  auto a = generate_sequence(*fp8, prompt, {.max_new_tokens = 4, .return_logits = true});
  auto b = generate_sequence(*f32, prompt, {.max_new_tokens = 4, .return_logits = true});
  ASSERT_TRUE(a.ok() && b.ok()) << a.error_message() << b.error_message();
  EXPECT_EQ(a->tokens, b->tokens);
  for (std::size_t i = 0; i < a->logits.size(); ++i) EXPECT_EQ(a->logits[i], b->logits[i]) << "token " << i;
}

// CpuFp8Activations::e4m3_1x128 on the FP8 goldens' checkpoint: the
// activation quantization the CUDA FP8 GEMMs apply, measured against the
// unquantized (dequantized-weight) run. Its size is what the CUDA FP8 goldens
// (tests/cuda/deepseek_golden_test.cpp) allow on top of their bf16 error.
// e4m3 keeps 3 mantissa bits: a value's rounding error is uniform within half
// a step, and the step is 2^-3 of the value's binade, so the error's rms is at
// most 2^-3 / sqrt(12) = 3.6% of the value (at the bottom of a binade; ~2.6%
// on average). A GEMM's output errs by that share of it (independent errors
// over its K terms). 22 GEMMs quantize here (layer 0: q_a, q_b, kv_a, o_proj,
// gate_up, down; each MoE layer: those four, the shared expert's two and the
// routed experts' two), independently: sqrt(22) x 3.6% = 16.9% if the residual
// stream diluted nothing. And above 0.5%, which no run without quantization
// reaches (f32 against f32: 0).
constexpr double kMaxRelativeE4m3Shift = 0.169;

TEST(DeepseekV3Cpu, Fp8ActivationQuantizationMovesLogitsByItsOwnError) {
  const std::string dir = testing::scratch_dir("ds-fp8-activations");
  ASSERT_TRUE(make_model(testing::deepseek_v3_fp8_model_options(dir)).ok());
  for (std::int32_t tokens : {12, 300}) {
    SCOPED_TRACE(::testing::Message() << "prompt of " << tokens);
    const std::vector<TokenId> prompt = testing::deepseek_v3_fp8_prompt(tokens);
    const std::int32_t blocks = (tokens + 8 + 15) / 16;
    auto run = [&](CpuFp8Activations fp8, std::int64_t dense_unquantized_max_rows) {
      auto backend = cpu_runner(dir, 16, blocks, fp8, dense_unquantized_max_rows);
      EXPECT_NE(backend, nullptr);
      auto result = generate_sequence(*backend, prompt, {.max_new_tokens = 1, .return_logits = true});
      EXPECT_TRUE(result.ok()) << result.error_message();
      return result.ok() ? result->logits.front() : std::vector<float>{};
    };
    const std::vector<float> f32 = run(CpuFp8Activations::f32, 0);
    const std::vector<float> all = run(CpuFp8Activations::e4m3_1x128, 0);
    const std::vector<float> long_dense = run(CpuFp8Activations::e4m3_1x128, 16);
    const double error = testing::relative_logit_error(all, f32);
    EXPECT_GT(error, 5e-3) << "the activations were not quantized";
    EXPECT_LE(error, kMaxRelativeE4m3Shift);
    if (tokens > 16) {  // every GEMM of the prompt has more than 16 rows: the threshold changes nothing
      EXPECT_EQ(long_dense, all);
    } else {  // the dense GEMMs keep f32 activations, the experts quantize
      const double experts_only = testing::relative_logit_error(long_dense, f32);
      EXPECT_NE(long_dense, all);
      EXPECT_GT(experts_only, 0.0);
      std::printf("[ info ] prompt of %d: the routed experts' quantization alone moves the logits %.5f\n", tokens,
                  experts_only);
    }
    std::printf("[ info ] prompt of %d: e4m3 1x128 activations move the logits %.5f (relative L2)\n", tokens, error);
  }
}

}  // namespace
}  // namespace sluice
