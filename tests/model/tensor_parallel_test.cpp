// Tensor parallelism on the CPU (one thread per rank, a CpuCommunicatorGroup):
// the sharded model against the unsharded one on the same checkpoint, for
// tiny random-weight models of the dense family (GQA and MHA, q/k/v biases
// and a tied head in qwen2, q/k norms in qwen3, untied heads in llama), at 2
// and 4 ranks; a config that cannot split; and a rank that fails.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/model/generate.h"
#include "sluice/model/model_runner.h"
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

class TensorParallelTest : public ::testing::TestWithParam<TinyModel> {};

TEST_P(TensorParallelTest, ShardedLogitsAndGreedyTokensMatchTheUnshardedRun) {
  const std::string dir = make_tiny(GetParam());
  auto whole = make_model_runner(dir, make_cpu_ops({.num_threads = 1}), kRunnerOptions);
  ASSERT_TRUE(whole.ok()) << whole.error_message();
  const std::vector<TokenId> prompt = {5, 17, 300, 42, 511, 0, 256, 99, 128, 7, 64};
  // Whole-prompt prefill and chunked prefill (several steps with a KV history).
  for (std::int32_t chunk : {0, 4}) {
    const GenerateOptions generate{.max_new_tokens = 8, .prefill_chunk_tokens = chunk, .return_logits = true};
    auto expected = generate_sequence(**whole, prompt, generate);
    ASSERT_TRUE(expected.ok()) << expected.error_message();
    for (std::int32_t ranks : {2, 4}) {
      SCOPED_TRACE(::testing::Message() << GetParam().name << " TP " << ranks << " chunk " << chunk);
      auto sharded = make_tensor_parallel_model_runner(dir, cpu_ops_per_rank(ranks), kRunnerOptions);
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
      std::printf("%s TP %d chunk %d: max |dlogit| %.3g over %zu steps\n", GetParam().name, ranks, chunk, worst,
                  got->logits.size());
    }
  }
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

TEST(TensorParallel, KvHeadsThatDoNotSplitAreRefusedByName) {
  const std::string dir = make_tiny({"two_kv_heads", tiny(Architecture::llama, 4, 2, 5)});
  auto sharded = make_tensor_parallel_model_runner(dir, cpu_ops_per_rank(4), kRunnerOptions);
  ASSERT_FALSE(sharded.ok());
  EXPECT_NE(sharded.error_message().find("num_key_value_heads (2)"), std::string::npos) << sharded.error_message();
}

// CPU ops whose matmul throws once armed: a rank that fails mid-forward,
// while the other ranks go on to wait for it in a collective.
class ThrowingOps final : public Ops {
 public:
  explicit ThrowingOps(std::atomic<bool>& armed) : inner_(make_cpu_ops({.num_threads = 1})), armed_(armed) {}

  DType activation_dtype() const override { return inner_->activation_dtype(); }
  Result<Tensor> upload_weight(const Tensor& host) override { return inner_->upload_weight(host); }
  Result<Tensor> upload_concatenated(std::span<const Tensor> parts) override {
    return inner_->upload_concatenated(parts);
  }
  Status allocate_kv_cache(const KvCacheSpec& spec) override { return inner_->allocate_kv_cache(spec); }
  Tensor scratch(Shape shape, DType dtype) override { return inner_->scratch(shape, dtype); }
  void begin_step(const StepLayout& layout) override { inner_->begin_step(layout); }
  void embedding(const Tensor& table, Tensor out) override { inner_->embedding(table, out); }
  Status embedding_shard(const Tensor& table, TokenId first_token_id, Tensor out) override {
    return inner_->embedding_shard(table, first_token_id, out);
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    inner_->rms_norm(x, weight, eps, out);
  }
  void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    inner_->add_rms_norm(residual, x, weight, eps, out);
  }
  void matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor out) override {
    if (armed_) throw std::runtime_error("injected matmul failure");
    inner_->matmul(x, w, bias, out);
  }
  void rope(Tensor q, Tensor k, const RopeParams& params) override { inner_->rope(q, k, params); }
  void attention(std::int32_t layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 Tensor out) override {
    inner_->attention(layer, q, k, v, scale, out);
  }
  void silu_mul(const Tensor& gate_up, Tensor out) override { inner_->silu_mul(gate_up, out); }
  Status rope_partial(Tensor x, std::int32_t head_stride, std::int32_t rotary_offset,
                      const RopeParams& params) override {
    return inner_->rope_partial(x, head_stride, rotary_offset, params);
  }
  Status mla_attention(std::int32_t layer, const MlaInputs& in, const MlaShape& shape, Tensor out) override {
    return inner_->mla_attention(layer, in, shape, out);
  }
  Status moe_route(const Tensor& router_logits, const Tensor& correction_bias, const MoeRouting& routing,
                   MoeAssignment out) override {
    return inner_->moe_route(router_logits, correction_bias, routing, out);
  }
  Status moe_experts(const Tensor& x, const MoeExpertWeights& experts, const MoeAssignment& assignment,
                     Tensor out) override {
    return inner_->moe_experts(x, experts, assignment, out);
  }
  void gather_sample_rows(const Tensor& x, Tensor out) override { inner_->gather_sample_rows(x, out); }
  std::vector<SampleResult> sample(const Tensor& logits, std::span<const SampleRequest> requests) override {
    return inner_->sample(logits, requests);
  }

 private:
  std::unique_ptr<Ops> inner_;
  std::atomic<bool>& armed_;
};

// Rank 1 throws in the second step: that step fails with its reason (no
// rank hangs: ctest's timeout would report one), and the group stays down,
// so the next step fails at once instead of running on a broken group.
TEST(TensorParallel, ARankThatThrowsFailsTheStepCleanly) {
  const std::string dir = make_tiny({"failing_rank", tiny(Architecture::llama, 8, 4, 6)});
  for (std::int32_t ranks : {2, 4}) {
    std::atomic<bool> armed{false};
    std::vector<std::unique_ptr<Ops>> ops = cpu_ops_per_rank(ranks);
    ops[1] = std::make_unique<ThrowingOps>(armed);
    auto backend = make_tensor_parallel_model_runner(dir, std::move(ops), kRunnerOptions);
    ASSERT_TRUE(backend.ok()) << backend.error_message();
    const std::vector<TokenId> tokens = {1, 2, 3, 4, 5, 6};
    const std::vector<BlockId> blocks = {0, 1};
    auto step = [&](std::int32_t computed, std::int32_t num_new) {
      Batch batch;
      batch.sequences.push_back(SequenceStep{.seq_id = 1,
                                             .tokens = tokens,
                                             .num_prompt_tokens = 4,
                                             .num_computed_tokens = computed,
                                             .num_new_tokens = num_new,
                                             .block_table = blocks,
                                             .sample = true});
      return (*backend)->execute(batch);
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

}  // namespace
}  // namespace sluice
