// make-model is bit-for-bit reproducible from its seed, and its tokenizer is a
// real byte-level BPE within the vocabulary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sluice/common/io.h"
#include "sluice/common/rng.h"
#include "sluice/model/config.h"
#include "sluice/model/make_model.h"
#include "sluice/model/safetensors.h"
#include "sluice/model/tokenizer_builder.h"
#include "sluice/tokenizer/tokenizer.h"
#include "test_models.h"

namespace sluice {
namespace {

MakeModelOptions small(std::uint64_t seed, const std::string& dir) {
  return MakeModelOptions{.architecture = Architecture::qwen3, .num_layers = 1, .hidden_size = 32, .num_heads = 2,
                          .num_kv_heads = 1, .intermediate_size = 48, .vocab_size = 400, .head_dim = 24,
                          .seed = seed, .out_dir = dir};
}

TEST(MakeModel, SameSeedSameBytes) {
  const std::string a = testing::scratch_dir("make-model-a"), b = testing::scratch_dir("make-model-b");
  const std::string c = testing::scratch_dir("make-model-c");
  ASSERT_TRUE(make_model(small(5, a)).ok());
  ASSERT_TRUE(make_model(small(5, b)).ok());
  ASSERT_TRUE(make_model(small(6, c)).ok());
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(read_file(a + "/" + file).value(), read_file(b + "/" + file).value()) << file;
  }
  EXPECT_NE(read_file(a + "/model.safetensors").value(), read_file(c + "/model.safetensors").value());
}

TEST(MakeModel, WritesAConfigSluiceAccepts) {
  const std::string dir = testing::scratch_dir("make-model-config");
  ASSERT_TRUE(make_model(small(1, dir)).ok());
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.error_message();
  EXPECT_EQ(config->head_dim, 24);
  EXPECT_TRUE(config->qk_norm);
  EXPECT_EQ(config->vocab_size, 400);
}

MakeModelOptions tiny_deepseek(std::uint64_t seed, DType dtype, const std::string& dir) {
  MakeModelOptions o{.architecture = Architecture::deepseek_v3, .num_layers = 2, .hidden_size = 32,
                     .num_heads = 2, .intermediate_size = 48, .vocab_size = 400, .seed = seed, .dtype = dtype,
                     .max_position_embeddings = 1024, .out_dir = dir};
  o.deepseek_v3.mtp_layers = 1;
  return o;
}

TEST(MakeModel, DeepseekV3SameSeedSameBytes) {
  for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
    const std::string a = testing::scratch_dir("make-ds-a"), b = testing::scratch_dir("make-ds-b");
    ASSERT_TRUE(make_model(tiny_deepseek(5, dtype, a)).ok());
    ASSERT_TRUE(make_model(tiny_deepseek(5, dtype, b)).ok());
    for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"})
      EXPECT_EQ(read_file(a + "/" + file).value(), read_file(b + "/" + file).value()) << file;
  }
}

TEST(MakeModel, DeepseekV3ConfigSluiceAccepts) {
  const std::string dir = testing::scratch_dir("make-ds-config");
  MakeModelOptions o = tiny_deepseek(1, DType::f8_e4m3, dir);
  o.deepseek_v3.q_lora_rank = 0;
  ASSERT_TRUE(make_model(o).ok());
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.error_message();
  ASSERT_TRUE(config->deepseek_v3.has_value());
  EXPECT_FALSE(config->deepseek_v3->q_lora_rank.has_value());
  EXPECT_EQ(config->deepseek_v3->num_nextn_predict_layers, 1);
  EXPECT_EQ(config->deepseek_v3->first_k_dense_replace, 1);
  ASSERT_TRUE(config->rope_yarn.has_value());
  EXPECT_EQ(config->rope_yarn->original_max_position_embeddings, 256);
  ASSERT_TRUE(config->fp8.has_value());
  // Not a multiple: YaRN needs whole original positions.
  o.deepseek_v3.yarn_factor = 3;
  EXPECT_FALSE(make_model(o).ok());
  o.deepseek_v3.yarn_factor = 4;
  o.deepseek_v3.n_group = 3;
  EXPECT_FALSE(make_model(o).ok());
}

// A tensor large enough to be made in pieces on several threads holds exactly
// the sequential stream its definition names: SplitMix64 seeded with seed ^
// FNV-1a(name), value i = center + spread * (2 u_i - 1) (DeepSeek-V3's
// embedding: center 0, spread 1).
TEST(MakeModel, ParallelPiecesAreTheSequentialStream) {
  const std::string dir = testing::scratch_dir("make-ds-parallel");
  MakeModelOptions o = tiny_deepseek(9, DType::f32, dir);
  o.vocab_size = 8192;
  o.hidden_size = 512;  // 4M embedding values: pieces of 1M
  ASSERT_TRUE(make_model(o).ok());
  auto checkpoint = Checkpoint::open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error_message();
  const std::string name = "model.embed_tokens.weight";
  auto embedding = checkpoint->get(name, Shape{o.vocab_size, o.hidden_size});
  ASSERT_TRUE(embedding.ok()) << embedding.error_message();
  ASSERT_EQ(embedding->dtype, DType::f32);
  std::uint64_t hash = 1469598103934665603ULL;
  for (char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  SplitMix64 rng(o.seed ^ hash);
  const auto* values = static_cast<const float*>(embedding->data);
  std::int64_t mismatches = 0, first_mismatch = -1;
  for (std::int64_t i = 0; i < embedding->shape.numel(); ++i) {
    const float expected = static_cast<float>(2.0 * rng.uniform() - 1.0);
    if (values[i] != expected && mismatches++ == 0) first_mismatch = i;
  }
  EXPECT_EQ(mismatches, 0) << "first at value " << first_mismatch;
}

TEST(MakeModel, TokenizerFitsTheVocabulary) {
  auto built = build_byte_level_tokenizer(400);
  ASSERT_TRUE(built.ok());
  EXPECT_LE(built->num_tokens, 400);
  EXPECT_GT(built->num_tokens, min_builtin_vocab_size());  // some merges were learned
  const auto tokenizer = nlohmann::json::parse(built->tokenizer_json);
  EXPECT_EQ(tokenizer["model"]["vocab"].size() + tokenizer["added_tokens"].size(),
            static_cast<std::size_t>(built->num_tokens));
  EXPECT_EQ(tokenizer["added_tokens"][0]["content"], "<|begin_of_text|>");
  EXPECT_EQ(tokenizer["added_tokens"][0]["id"], built->bos_token_id);
  EXPECT_FALSE(build_byte_level_tokenizer(100).ok());
}

// A random model samples any id; each must decode to text so its output
// streams like a real model's, while encoding never uses the fillers.
TEST(MakeModel, EveryIdDecodesAndFillersAreNeverEncoded) {
  auto built = build_byte_level_tokenizer(3000);
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(built->num_tokens, 3000);
  EXPECT_LT(built->first_filler_token_id, 500);
  auto tokenizer = Tokenizer::from_json(built->tokenizer_json, built->tokenizer_config_json);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error_message();
  EXPECT_EQ(tokenizer->vocab_size(), 3000);
  for (TokenId id = 0; id < tokenizer->vocab_size(); ++id) {
    if (tokenizer->is_special(id)) continue;
    ASSERT_FALSE(tokenizer->decode(std::vector<TokenId>{id}, false).empty()) << id;
  }
  const std::string text = "The quick brown fox jumps over the lazy dog; qa qb qzz wrote code() {return 1;}";
  for (TokenId id : tokenizer->encode(text, false)) EXPECT_LT(id, built->first_filler_token_id) << id;
}

TEST(MakeModel, RejectsBadShapes) {
  const std::string dir = testing::scratch_dir("make-model-bad");
  auto bad_gqa = small(1, dir);
  bad_gqa.num_kv_heads = 3;
  EXPECT_FALSE(make_model(bad_gqa).ok());
  auto tiny_vocab = small(1, dir);
  tiny_vocab.vocab_size = 10;
  EXPECT_FALSE(make_model(tiny_vocab).ok());
  auto odd_head = small(1, dir);
  odd_head.head_dim = 7;
  EXPECT_FALSE(make_model(odd_head).ok());
}

}  // namespace
}  // namespace sluice
