// config.json parsing: every architecture's fields, and every unsupported field
// rejected by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sluice/model/config.h"

namespace sluice {
namespace {

using nlohmann::json;

json base_config(const char* model_type) {
  return {{"model_type", model_type}, {"vocab_size", 512}, {"hidden_size", 64}, {"intermediate_size", 128},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-5}, {"hidden_act", "silu"}};
}

Result<ModelConfig> parse(const json& j) { return parse_model_config(j.dump(), "config.json"); }

void expect_error_mentions(const json& j, const std::string& needle) {
  auto result = parse(j);
  ASSERT_FALSE(result.ok()) << "accepted: " << j.dump();
  EXPECT_NE(result.error().message.find(needle), std::string::npos) << result.error().message;
}

TEST(ModelConfig, LlamaDefaults) {
  auto c = parse(base_config("llama"));
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->architecture, Architecture::llama);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->q_size(), 64);
  EXPECT_EQ(c->kv_size(), 32);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_FALSE(c->rope_llama3.has_value());
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
}

TEST(ModelConfig, Llama3RopeScalingInBothSpellings) {
  json legacy = base_config("llama");
  legacy["rope_theta"] = 500000.0;
  legacy["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  json v5 = base_config("llama");
  v5["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                           {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 8192}};
  for (const json& j : {legacy, v5}) {
    auto c = parse(j);
    ASSERT_TRUE(c.ok()) << c.error_message();
    ASSERT_TRUE(c->rope_llama3.has_value());
    EXPECT_FLOAT_EQ(c->rope_llama3->factor, 8.0f);
    EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  }
}

TEST(ModelConfig, FamilyFlags) {
  auto qwen2 = parse(base_config("qwen2"));
  ASSERT_TRUE(qwen2.ok()) << qwen2.error_message();
  EXPECT_TRUE(qwen2->attention_bias);
  json q3 = base_config("qwen3");
  q3["head_dim"] = 32;
  auto qwen3 = parse(q3);
  ASSERT_TRUE(qwen3.ok()) << qwen3.error_message();
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_EQ(qwen3->head_dim, 32);
  EXPECT_EQ(qwen3->q_size(), 128);
}

TEST(ModelConfig, EosListAndTiedEmbeddings) {
  json j = base_config("mistral");
  j["eos_token_id"] = {2, 7};
  j["tie_word_embeddings"] = true;
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->eos_token_ids, (std::vector<std::int32_t>{2, 7}));
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(ModelConfig, QwenSlidingWindowDisabledIsAccepted) {
  json j = base_config("qwen2");
  j["use_sliding_window"] = false;
  j["sliding_window"] = 4096;
  EXPECT_TRUE(parse(j).ok());
}

TEST(ModelConfig, RejectsUnsupportedFieldsByName) {
  json window = base_config("mistral");
  window["sliding_window"] = 1024;
  expect_error_mentions(window, "sliding_window");
  json use_window = base_config("qwen2");
  use_window["use_sliding_window"] = true;
  expect_error_mentions(use_window, "use_sliding_window");
  json act = base_config("llama");
  act["hidden_act"] = "gelu";
  expect_error_mentions(act, "hidden_act");
  json mlp_bias = base_config("llama");
  mlp_bias["mlp_bias"] = true;
  expect_error_mentions(mlp_bias, "mlp_bias");
  json rope = base_config("llama");
  rope["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error_mentions(rope, "yarn");
  json unknown = base_config("llama");
  unknown["quantization_config"] = {{"quant_method", "fp8"}};
  expect_error_mentions(unknown, "quantization_config");
  json layers = base_config("qwen3");
  layers["layer_types"] = {"full_attention", "sliding_attention"};
  expect_error_mentions(layers, "layer_types");
}

TEST(ModelConfig, RejectsBadValues) {
  expect_error_mentions(json{{"model_type", "gpt2"}}, "gpt2");
  json missing = base_config("llama");
  missing.erase("hidden_size");
  expect_error_mentions(missing, "hidden_size");
  json negative = base_config("llama");
  negative["num_hidden_layers"] = -1;
  expect_error_mentions(negative, "num_hidden_layers");
  json gqa = base_config("llama");
  gqa["num_key_value_heads"] = 3;
  expect_error_mentions(gqa, "num_key_value_heads");
  json type = base_config("llama");
  type["vocab_size"] = "512";
  expect_error_mentions(type, "vocab_size");
  auto not_json = parse_model_config("{not json", "config.json");
  ASSERT_FALSE(not_json.ok());
  EXPECT_NE(not_json.error().message.find("config.json"), std::string::npos);
}

TEST(ModelConfig, MissingFileNamesThePath) {
  auto c = load_model_config("/nonexistent/model");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("/nonexistent/model/config.json"), std::string::npos);
}

}  // namespace
}  // namespace sluice
