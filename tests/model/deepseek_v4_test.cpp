// DeepSeek-V4 stage 1 without transformers: config.json parsing (the legacy
// spellings folded in as transformers folds them, unknown fields refused),
// the CPU kernels against hand-computed values, and the
// reference's own consistency (one prefill, one token at a time and chunks
// land on the same logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/model/config.h"
#include "sluice/model/deepseek_v4.h"
#include "sluice/model/deepseek_v4_pool_fold.h"
#include "sluice/model/make_model.h"
#include "sluice/model/model_runner.h"
#include "../support/tiny_deepseek_v4.h"
#include "test_models.h"

namespace sluice {
namespace {

using nlohmann::json;

json deepseek_spelling() { return testing::deepseek_v4_flash_config_json(); }

Result<ModelConfig> parse(const json& j) { return parse_model_config(j.dump(), "config.json"); }

TEST(DeepseekV4Config, FoldsDeepseekSpellingAsTransformers) {
  auto config = parse(deepseek_spelling());
  ASSERT_TRUE(config.ok()) << config.error_message();
  ASSERT_NE(config->deepseek_v4, nullptr);
  const DeepseekV4Config& ds = *config->deepseek_v4;
  ASSERT_EQ(ds.layer_types.size(), 43u);  // the 44th ratio is cut, as transformers cuts it
  EXPECT_EQ(ds.layer_types[0], DeepseekV4Attention::sliding);
  EXPECT_EQ(ds.layer_types[2], DeepseekV4Attention::compressed_sparse);
  EXPECT_EQ(ds.layer_types[3], DeepseekV4Attention::heavily_compressed);
  ASSERT_EQ(ds.mlp_layer_types.size(), 43u);
  EXPECT_EQ(ds.mlp_layer_types[2], DeepseekV4Mlp::hash_moe);
  EXPECT_EQ(ds.mlp_layer_types[3], DeepseekV4Mlp::moe);
  EXPECT_EQ(ds.qk_rope_head_dim, 64);
  EXPECT_EQ(ds.csa_compress_rate, 4);
  EXPECT_EQ(ds.hca_compress_rate, 128);
  EXPECT_FLOAT_EQ(ds.main_rope.theta, 10000.0f);
  EXPECT_FALSE(ds.main_rope.yarn.has_value());
  EXPECT_FLOAT_EQ(ds.compress_rope.theta, 160000.0f);
  ASSERT_TRUE(ds.compress_rope.yarn.has_value());
  EXPECT_FLOAT_EQ(ds.compress_rope.yarn->factor, 16.0f);
  EXPECT_FLOAT_EQ(ds.compress_rope.cos_sin_scale, 1.0f);  // V4 drops YaRN's mscale
  EXPECT_TRUE(ds.fp4_experts);
  ASSERT_TRUE(config->fp8.has_value());
  EXPECT_EQ(config->fp8->block_rows, 128);
  EXPECT_EQ(config->num_kv_heads, 1);
  EXPECT_EQ(config->intermediate_size, 2048);
}

TEST(DeepseekV4Config, DefaultScheduleIsTransformers) {
  json j = deepseek_spelling();
  j.erase("compress_ratios");
  j.erase("num_hash_layers");
  j["num_hidden_layers"] = 6;
  auto config = parse(j);
  ASSERT_TRUE(config.ok()) << config.error_message();
  using A = DeepseekV4Attention;
  EXPECT_EQ(config->deepseek_v4->layer_types,
            (std::vector<A>{A::heavily_compressed, A::heavily_compressed, A::heavily_compressed,
                            A::compressed_sparse, A::heavily_compressed, A::compressed_sparse}));
  using M = DeepseekV4Mlp;
  EXPECT_EQ(config->deepseek_v4->mlp_layer_types, (std::vector<M>{M::hash_moe, M::hash_moe, M::hash_moe, M::moe,
                                                                  M::moe, M::moe}));
}

TEST(DeepseekV4Config, ModernSpellingAndNestedRope) {
  json j = deepseek_spelling();
  j.erase("compress_ratios");
  j.erase("qk_rope_head_dim");
  j.erase("rope_scaling");
  j["num_hidden_layers"] = 2;
  j["layer_types"] = {"sliding_attention", "compressed_sparse_attention"};
  j["mlp_layer_types"] = {"moe", "hash_moe"};
  j["compress_rates"] = {{"compressed_sparse_attention", 8}, {"heavily_compressed_attention", 64}};
  j["partial_rotary_factor"] = 0.25;
  j["rope_parameters"] = {{"main", {{"rope_type", "default"}, {"rope_theta", 5000.0}}},
                          {"compress", {{"rope_type", "default"}, {"rope_theta", 80000.0}}}};
  auto config = parse(j);
  ASSERT_TRUE(config.ok()) << config.error_message();
  const DeepseekV4Config& ds = *config->deepseek_v4;
  EXPECT_EQ(ds.qk_rope_head_dim, 128);
  EXPECT_EQ(ds.csa_compress_rate, 8);
  EXPECT_EQ(ds.hca_compress_rate, 64);
  EXPECT_EQ(ds.mlp_layer_types[0], DeepseekV4Mlp::moe);
  EXPECT_FLOAT_EQ(ds.main_rope.theta, 5000.0f);
  EXPECT_FLOAT_EQ(ds.compress_rope.theta, 80000.0f);
}

TEST(DeepseekV4Config, RefusesWhatItCannotHonourByName) {
  struct Case {
    const char* key;
    json value;
    const char* says;
  };
  for (const Case& c : {Case{"made_up_field", 1, "made_up_field"}, Case{"compress_ratios", {0, 8}, "0, 4 and 128"},
                        Case{"scoring_func", "softmax", "scoring_func"}, Case{"num_key_value_heads", 2, "K=V"},
                        Case{"n_shared_experts", 2, "n_shared_experts"},
                        Case{"layer_types", {"sliding_attention"}, "num_hidden_layers"}}) {
    json j = deepseek_spelling();
    j[c.key] = c.value;
    auto config = parse(j);
    ASSERT_FALSE(config.ok()) << c.key;
    EXPECT_NE(config.error_message().find(c.says), std::string::npos) << config.error_message();
  }
}

TEST(DeepseekV4Reference, PrefillStepsAndChunksAgree) {
  const std::string dir = testing::scratch_dir("deepseek-v4-consistency");
  const Status made = make_model(testing::tiny_deepseek_v4_options(dir, 5));
  ASSERT_TRUE(made.ok()) << made.error_message();
  auto loaded = testing::load_deepseek_v4_on_cpu(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.error_message();
  const DeepseekV4Reference& model = *(*loaded)->model;
  std::vector<TokenId> tokens;
  for (int i = 0; i < 45; ++i) tokens.push_back((i * 37 + 11) % 320);
  auto whole = model.start_sequence();
  auto one_shot = model.append(whole, tokens);
  ASSERT_TRUE(one_shot.ok()) << one_shot.error_message();
  auto stepwise = model.start_sequence();
  std::vector<float> last;
  for (TokenId t : tokens) {
    auto logits = model.append(stepwise, std::span(&t, 1));
    ASSERT_TRUE(logits.ok()) << logits.error_message();
    last = *logits;
  }
  EXPECT_EQ(stepwise.num_tokens, 45);
  EXPECT_LE(testing::max_abs_diff(*one_shot, last), 1e-5f);
  float spread = 0.0f;
  for (float v : last) spread = std::max(spread, std::fabs(v - last.front()));
  EXPECT_GT(spread, 0.1f);  // logits that mean something: not a constant row
  auto bad = model.append(whole, std::vector<TokenId>{320});
  EXPECT_FALSE(bad.ok());
}

TEST(DeepseekV4Kernels, SinkJoinsTheDenominatorOnly) {
  const cpu::DeepseekV4CpuKernels k;
  // One head of dim 2, two keys with logits 0 and ln 3 (scale 1), sink 0:
  // weights 1/5 and 3/5, the sink takes 1/5.
  const std::vector<float> q{std::log(3.0f), 0.0f}, keys{0.0f, 2.0f, 1.0f, 4.0f}, sinks{0.0f};
  std::vector<float> out(2);
  k.sink_attention(q, keys, sinks, {.num_heads = 1, .head_dim = 2, .softmax_scale = 1.0f}, out);
  EXPECT_NEAR(out[0], 0.6f, 1e-6f);
  EXPECT_NEAR(out[1], 0.2f * 2.0f + 0.6f * 4.0f, 1e-6f);
}

// The online pool against the two-pass softmax in double: 11 tokens of 5
// channels, gates spread over 60 (so the running max moves and the weights
// span many orders), one channel's gates rising, one falling; a -inf gate
// adds nothing; nothing folded gives 0.
TEST(DeepseekV4PoolFold, IsTheSoftmaxPoolInOnePass) {
  constexpr std::size_t kTokens = 11, kDim = 5;
  std::vector<float> values(kTokens * kDim), gates(kTokens * kDim);
  for (std::size_t t = 0; t < kTokens; ++t)
    for (std::size_t c = 0; c < kDim; ++c) {
      values[t * kDim + c] = std::sin(static_cast<float>(3 * t + c));
      gates[t * kDim + c] = c == 0   ? 6.0f * static_cast<float>(t)
                            : c == 1 ? -6.0f * static_cast<float>(t)
                                     : 30.0f * std::cos(static_cast<float>(7 * t + c));
    }
  gates[4 * kDim + 2] = -std::numeric_limits<float>::infinity();
  std::vector<float> state(3 * kDim), pooled(kDim);
  deepseek_v4_pool_init(state);
  for (std::size_t t = 0; t < kTokens; ++t)
    deepseek_v4_pool_fold(state, std::span(values).subspan(t * kDim, kDim), std::span(gates).subspan(t * kDim, kDim));
  deepseek_v4_pool_finish(state, pooled);
  for (std::size_t c = 0; c < kDim; ++c) {
    double top = -std::numeric_limits<double>::infinity(), sum = 0.0, weighted = 0.0;
    for (std::size_t t = 0; t < kTokens; ++t) top = std::max(top, static_cast<double>(gates[t * kDim + c]));
    for (std::size_t t = 0; t < kTokens; ++t) {
      const double w = std::exp(static_cast<double>(gates[t * kDim + c]) - top);
      sum += w;
      weighted += w * values[t * kDim + c];
    }
    EXPECT_NEAR(pooled[c], weighted / sum, 1e-6) << "channel " << c;
  }
  std::vector<float> empty(3 * kDim), none(kDim, 1.0f);
  deepseek_v4_pool_init(empty);
  deepseek_v4_pool_finish(empty, none);
  EXPECT_EQ(none, std::vector<float>(kDim, 0.0f));
}

TEST(DeepseekV4Kernels, SinkhornMakesCombDoublyStochastic) {
  const cpu::DeepseekV4CpuKernels k;
  const HyperConnectionShape shape{.hc_mult = 4, .hidden = 3, .sinkhorn_iters = 20};
  std::vector<float> streams(12), fn(24 * 12), base(24), scale{1.0f, 1.0f, 1.0f};
  for (std::size_t i = 0; i < streams.size(); ++i) streams[i] = std::sin(1.0f + i);
  for (std::size_t i = 0; i < fn.size(); ++i) fn[i] = std::cos(0.7f * i);
  for (std::size_t i = 0; i < base.size(); ++i) base[i] = 0.1f * i;
  HyperConnectionMix mix;
  k.hc_pre(streams, {fn, base, scale}, shape, mix);
  for (int j = 0; j < 4; ++j) {
    float row = 0.0f, col = 0.0f;
    for (int i = 0; i < 4; ++i) {
      row += mix.comb[j * 4 + i];
      col += mix.comb[i * 4 + j];
    }
    EXPECT_NEAR(row, 1.0f, 1e-3f);
    EXPECT_NEAR(col, 1.0f, 1e-5f);  // the last normalization is by columns
  }
  for (float p : mix.post) EXPECT_TRUE(p > 0.0f && p < 2.0f);
}

TEST(DeepseekV4Kernels, RoutesBySqrtSoftplusAndHash) {
  const cpu::DeepseekV4CpuKernels k;
  const std::vector<float> logits{0.0f, 2.0f, -1.0f, 1.0f};
  auto score = [](double x) { return std::sqrt(std::log1p(std::exp(x))); };
  std::vector<std::int32_t> ids(2);
  std::vector<float> weights(2);
  // The bias moves expert 2 ahead of expert 3 but not its weight.
  k.route_sqrtsoftplus(logits, std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f}, {}, 2, 1.5f, ids, weights);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{2, 1}));  // best choice first
  const double sum = score(2.0) + score(-1.0);
  EXPECT_NEAR(weights[0], score(-1.0) / sum * 1.5, 1e-6);
  EXPECT_NEAR(weights[1], score(2.0) / sum * 1.5, 1e-6);
  const std::vector<std::int32_t> hashed{3, 0};
  k.route_sqrtsoftplus(logits, {}, hashed, 2, 1.0f, ids, weights);
  EXPECT_EQ(ids, hashed);
  EXPECT_NEAR(weights[0], score(1.0) / (score(1.0) + score(0.0)), 1e-6);
}

TEST(DeepseekV4Kernels, SwigluClampsGateAndUp) {
  const cpu::DeepseekV4CpuKernels k;
  // hidden 1, inter 1: gate = 5x, up = -7x; limit 2 clamps both.
  const std::vector<float> x{1.0f}, gate_up{5.0f, -7.0f}, down{3.0f};
  std::vector<float> out{1.0f};
  k.clamped_swiglu(x, gate_up, down, 2.0f, 0.5f, out);
  const double silu2 = 2.0 / (1.0 + std::exp(-2.0));
  EXPECT_NEAR(out[0], 1.0 + 0.5 * 3.0 * silu2 * -2.0, 1e-5);
}

}  // namespace
}  // namespace sluice
