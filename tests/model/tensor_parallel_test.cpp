// Tensor and expert parallelism on the CPU (one thread per rank, a
// CpuCommunicatorGroup): the sharded model against the unsharded one on the
// same checkpoint. Tiny random-weight models of the dense family (GQA and
// MHA, q/k/v biases and a tied head in qwen2, q/k norms in qwen3, untied
// heads in llama) at TP 2 and 4; tiny DeepSeek-V3 models (grouped routing,
// shared experts, dense layers first; q_lora and YaRN) at TP 2 and 4 (each
// expert's width split) and EP 2 and 4 (whole experts per rank); configs that
// cannot split; and a rank that fails.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/model/decoder_model.h"
#include "sluice/model/generate.h"
#include "sluice/model/model_runner.h"
#include "../support/throwing_ops.h"
#include "test_models.h"

namespace sluice {
namespace {

// Both runs compute in f32 from the same weights; the sharded one adds the
// row-parallel partial sums (o_proj, down_proj) in another order, which moves
// a logit by about 1e-6 here. 1e-4 leaves margin and still catches a wrong
// slice (which moves logits by O(0.1)).
constexpr float kMaxLogitError = 1e-4f;
constexpr std::int32_t kBlockSize = 4;
constexpr std::int32_t kNumBlocks = 64;

using testing::max_abs_diff;

struct TinyModel {
  const char* name;
  MakeModelOptions options;
};
void PrintTo(const TinyModel& model, std::ostream* os) { *os << model.name; }

std::string make_tiny(const TinyModel& model) {
  MakeModelOptions options = model.options;
  options.out_dir = testing::scratch_dir(std::string("tensor-parallel-") + model.name);
  const Status made = make_model(options);
  EXPECT_TRUE(made.ok()) << made.error_message();
  return options.out_dir;
}

std::vector<std::unique_ptr<Ops>> cpu_ops_per_rank(std::int32_t num_ranks) {
  std::vector<std::unique_ptr<Ops>> ops;
  for (std::int32_t r = 0; r < num_ranks; ++r) ops.push_back(make_cpu_ops({.num_threads = 1}));
  return ops;
}

const ModelRunnerOptions kRunnerOptions{.block_size_tokens = kBlockSize, .num_kv_blocks = kNumBlocks};

struct Split {
  std::int32_t ranks;
  bool expert_parallel;
};

// Generation over each split against the unsharded run of the model in `dir`:
// identical greedy tokens, logits within kMaxLogitError, on a whole-prompt
// prefill and a chunked one (several steps with a KV history).
void expect_splits_match_the_unsharded_run(const std::string& name, const std::string& dir,
                                           const std::vector<Split>& splits) {
  auto whole = make_model_runner(dir, make_cpu_ops({.num_threads = 1}), kRunnerOptions);
  ASSERT_TRUE(whole.ok()) << whole.error_message();
  const std::vector<TokenId> prompt = {5, 17, 300, 42, 511, 0, 256, 99, 128, 7, 64};
  for (std::int32_t chunk : {0, 4}) {
    const GenerateOptions generate{.max_new_tokens = 8, .prefill_chunk_tokens = chunk, .return_logits = true};
    auto expected = generate_sequence(**whole, prompt, generate);
    ASSERT_TRUE(expected.ok()) << expected.error_message();
    for (const Split& split : splits) {
      const char* kind = split.expert_parallel ? "EP" : "TP";
      SCOPED_TRACE(::testing::Message() << name << " " << kind << " " << split.ranks << " chunk " << chunk);
      ModelRunnerOptions options = kRunnerOptions;
      options.enable_expert_parallel = split.expert_parallel;
      auto sharded = make_tensor_parallel_model_runner(dir, cpu_ops_per_rank(split.ranks), options);
      ASSERT_TRUE(sharded.ok()) << sharded.error_message();
      auto got = generate_sequence(**sharded, prompt, generate);
      ASSERT_TRUE(got.ok()) << got.error_message();
      EXPECT_EQ(got->tokens, expected->tokens);
      ASSERT_EQ(got->logits.size(), expected->logits.size());
      float worst = 0.0f;
      for (std::size_t i = 0; i < got->logits.size(); ++i)
        worst = std::max(worst, max_abs_diff(got->logits[i], expected->logits[i]));
      EXPECT_LE(worst, kMaxLogitError);
      // The sharded run is not the unsharded one by accident: logits differ
      // between steps, so a rank that returned stale or partial logits would show.
      EXPECT_GT(max_abs_diff(got->logits.front(), got->logits.back()), 0.01f);
      std::printf("%s %s %d chunk %d: max |dlogit| %.3g over %zu steps\n", name.c_str(), kind, split.ranks, chunk,
                  worst, got->logits.size());
    }
  }
}

class TensorParallelTest : public ::testing::TestWithParam<TinyModel> {};

TEST_P(TensorParallelTest, ShardedLogitsAndGreedyTokensMatchTheUnshardedRun) {
  expect_splits_match_the_unsharded_run(GetParam().name, make_tiny(GetParam()), {{2, false}, {4, false}});
}

MakeModelOptions tiny(Architecture arch, std::int32_t heads, std::int32_t kv_heads, std::uint64_t seed) {
  return MakeModelOptions{.architecture = arch, .num_layers = 2, .hidden_size = 64, .num_heads = heads,
                          .num_kv_heads = kv_heads, .intermediate_size = 128, .vocab_size = 512, .seed = seed};
}

INSTANTIATE_TEST_SUITE_P(
    DenseFamily, TensorParallelTest,
    ::testing::Values(TinyModel{"llama_gqa", tiny(Architecture::llama, 8, 4, 1)},
                      TinyModel{"llama_mha", tiny(Architecture::llama, 4, 4, 2)},
                      TinyModel{"qwen2_bias", tiny(Architecture::qwen2, 8, 4, 3)},
                      TinyModel{"qwen3_qk_norm", tiny(Architecture::qwen3, 8, 4, 4)}),
    [](const ::testing::TestParamInfo<TinyModel>& info) { return std::string(info.param.name); });

// DeepSeek-V3's tiny golden shapes (tools/reference/golden_deepseek_v3_models.json):
// grouped_v3like (4 groups, top-2 groups, 16 experts top-4, 2 shared experts,
// 2 dense layers first) and qlora_yarn (8 experts in 4 groups, q_lora, YaRN).
// Each expert's width split (TP) and whole experts per rank (EP): 8 experts
// over 4 ranks leaves 2 per rank, so most of a token's top-k is remote.
class DeepseekV3ParallelTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DeepseekV3ParallelTest, ShardedLogitsAndGreedyTokensMatchTheUnshardedRun) {
  const std::string name = GetParam();
  const std::string dir = testing::make_deepseek_v3_model(name, "tensor-parallel-ds-" + name);
  expect_splits_match_the_unsharded_run(name, dir, {{2, false}, {4, false}, {2, true}, {4, true}});
}

INSTANTIATE_TEST_SUITE_P(GoldenShapes, DeepseekV3ParallelTest, ::testing::Values("grouped_v3like", "qlora_yarn"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// Refusals name the field that does not split, and the flag.
TEST(DeepseekV3Parallel, SplitsThatDoNotDivideAreRefusedByName) {
  const std::string dir = testing::make_deepseek_v3_model("qlora_yarn", "tensor-parallel-ds-refusals");
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.error_message();
  auto refusal = [&](const ModelConfig& c, std::int32_t ranks, bool expert_parallel) {
    const Status status = check_tensor_parallel(c, ranks, expert_parallel);
    return status.ok() ? std::string("accepted") : status.error_message();
  };
  EXPECT_EQ(refusal(*config, 4, true), "accepted");
  ModelConfig six_experts = *config;
  six_experts.deepseek_v3->n_routed_experts = 6;  // 6 experts over 4 ranks
  six_experts.deepseek_v3->n_group = 2;
  EXPECT_NE(refusal(six_experts, 4, true).find("must divide the model's n_routed_experts (6)"), std::string::npos)
      << refusal(six_experts, 4, true);
  EXPECT_EQ(refusal(six_experts, 4, false), "accepted") << "without EP only each expert's width splits";
  ModelConfig narrow_experts = *config;
  narrow_experts.deepseek_v3->moe_intermediate_size = 30;
  narrow_experts.deepseek_v3->n_shared_experts = 2;  // the shared experts' 60 split; one expert's 30 does not
  EXPECT_NE(refusal(narrow_experts, 4, false).find("must divide the model's moe_intermediate_size (30)"),
            std::string::npos)
      << refusal(narrow_experts, 4, false);
  ModelConfig two_heads = *config;
  two_heads.num_heads = 2;
  EXPECT_NE(refusal(two_heads, 4, true).find("num_attention_heads (2)"), std::string::npos);
  EXPECT_NE(refusal(*config, 1, true).find("--enable-expert-parallel needs --tensor-parallel-size > 1"),
            std::string::npos);
  // And through the runner: the load fails with the same words, no rank starts.
  ModelRunnerOptions options = kRunnerOptions;
  options.enable_expert_parallel = true;
  auto eight = make_tensor_parallel_model_runner(dir, cpu_ops_per_rank(8), options);
  ASSERT_FALSE(eight.ok());
  EXPECT_NE(eight.error_message().find("--tensor-parallel-size 8 must divide the model's num_attention_heads (4)"),
            std::string::npos)
      << eight.error_message();
}

TEST(TensorParallel, ExpertParallelOnADenseModelIsRefused) {
  const std::string dir = make_tiny({"dense_ep", tiny(Architecture::llama, 8, 4, 7)});
  ModelRunnerOptions options = kRunnerOptions;
  options.enable_expert_parallel = true;
  auto sharded = make_tensor_parallel_model_runner(dir, cpu_ops_per_rank(2), options);
  ASSERT_FALSE(sharded.ok());
  EXPECT_NE(sharded.error_message().find("--enable-expert-parallel: llama is a dense model"), std::string::npos)
      << sharded.error_message();
}

TEST(TensorParallel, KvHeadsThatDoNotSplitAreRefusedByName) {
  const std::string dir = make_tiny({"two_kv_heads", tiny(Architecture::llama, 4, 2, 5)});
  auto sharded = make_tensor_parallel_model_runner(dir, cpu_ops_per_rank(4), kRunnerOptions);
  ASSERT_FALSE(sharded.ok());
  EXPECT_NE(sharded.error_message().find("num_key_value_heads (2)"), std::string::npos) << sharded.error_message();
}

// One step of sequence 1 over the tokens 1-6 in blocks 0 and 1.
Result<StepOutput> step_of_six_tokens(Backend& backend, std::int32_t computed, std::int32_t num_new,
                                      std::int32_t num_prompt, bool sample) {
  static const std::vector<TokenId> tokens = {1, 2, 3, 4, 5, 6};
  static const std::vector<BlockId> blocks = {0, 1};
  Batch batch;
  batch.sequences.push_back(SequenceStep{.seq_id = 1,
                                         .tokens = tokens,
                                         .num_prompt_tokens = num_prompt,
                                         .num_computed_tokens = computed,
                                         .num_new_tokens = num_new,
                                         .block_table = blocks,
                                         .sample = sample});
  return backend.execute(batch);
}

// Rank 1 throws in the second step: that step fails with its reason (no
// rank hangs: ctest's timeout would report one), and the group stays down,
// so the next step fails at once instead of running on a broken group.
TEST(TensorParallel, ARankThatThrowsFailsTheStepCleanly) {
  const std::string dir = make_tiny({"failing_rank", tiny(Architecture::llama, 8, 4, 6)});
  for (std::int32_t ranks : {2, 4}) {
    std::atomic<bool> armed{false};
    std::vector<std::unique_ptr<Ops>> ops = cpu_ops_per_rank(ranks);
    ops[1] = std::make_unique<testing::ThrowingOps>(armed);
    auto backend = make_tensor_parallel_model_runner(dir, std::move(ops), kRunnerOptions);
    ASSERT_TRUE(backend.ok()) << backend.error_message();
    auto step = [&](std::int32_t computed, std::int32_t num_new) {
      return step_of_six_tokens(**backend, computed, num_new, /*num_prompt=*/4, /*sample=*/true);
    };
    auto first = step(0, 4);
    ASSERT_TRUE(first.ok()) << first.error_message();
    armed = true;
    auto second = step(4, 1);
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.error_message().find("rank 1: injected matmul failure"), std::string::npos)
        << second.error_message();
    armed = false;
    auto third = step(5, 1);
    ASSERT_FALSE(third.ok());
    EXPECT_NE(third.error_message().find("group is down"), std::string::npos) << third.error_message();
  }
}

// A step that samples nothing (a prefill chunk) returns only once every rank
// has run it (Ops::end_step), so its measured time is its own and a device
// queue never holds several chunks; a step that samples has waited in sample().
TEST(TensorParallel, AStepThatSamplesNothingWaitsForEveryRank) {
  const std::string dir = make_tiny({"end_step", tiny(Architecture::llama, 8, 4, 7)});
  std::atomic<bool> never{false};
  std::vector<std::unique_ptr<Ops>> ops;
  std::vector<const testing::ThrowingOps*> ranks;
  for (int r = 0; r < 2; ++r) {
    auto rank = std::make_unique<testing::ThrowingOps>(never);
    ranks.push_back(rank.get());
    ops.push_back(std::move(rank));
  }
  auto backend = make_tensor_parallel_model_runner(dir, std::move(ops), kRunnerOptions);
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  ASSERT_TRUE(step_of_six_tokens(**backend, 0, 4, /*num_prompt=*/6, /*sample=*/false).ok());
  for (const testing::ThrowingOps* rank : ranks) EXPECT_EQ(rank->num_end_steps(), 1);
  auto last = step_of_six_tokens(**backend, 4, 2, /*num_prompt=*/6, /*sample=*/true);
  ASSERT_TRUE(last.ok()) << last.error_message();
  EXPECT_TRUE(last->sequences[0].token.has_value());
  for (const testing::ThrowingOps* rank : ranks) EXPECT_EQ(rank->num_end_steps(), 1);
}

}  // namespace
}  // namespace sluice
