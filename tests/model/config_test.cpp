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

// The DeepSeek-V3 config.json as the checkpoint ships it (values of the real
// model), with the fields transformers does not read.
json deepseek_v3_config() {
  return {{"model_type", "deepseek_v3"}, {"architectures", {"DeepseekV3ForCausalLM"}},
          {"auto_map", {{"AutoConfig", "configuration_deepseek.DeepseekV3Config"}}},
          {"vocab_size", 129280}, {"hidden_size", 7168}, {"intermediate_size", 18432},
          {"moe_intermediate_size", 2048}, {"num_hidden_layers", 61}, {"num_nextn_predict_layers", 1},
          {"num_attention_heads", 128}, {"num_key_value_heads", 128}, {"n_shared_experts", 1},
          {"n_routed_experts", 256}, {"ep_size", 1}, {"routed_scaling_factor", 2.5}, {"kv_lora_rank", 512},
          {"q_lora_rank", 1536}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128}, {"qk_nope_head_dim", 128},
          {"topk_method", "noaux_tc"}, {"n_group", 8}, {"topk_group", 4}, {"num_experts_per_tok", 8},
          {"moe_layer_freq", 1}, {"first_k_dense_replace", 3}, {"norm_topk_prob", true},
          {"scoring_func", "sigmoid"}, {"aux_loss_alpha", 0.001}, {"seq_aux", true}, {"hidden_act", "silu"},
          {"max_position_embeddings", 163840}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000},
          {"rope_scaling", {{"beta_fast", 32}, {"beta_slow", 1}, {"factor", 40}, {"mscale", 1.0},
                            {"mscale_all_dim", 1.0}, {"original_max_position_embeddings", 4096}, {"type", "yarn"}}},
          {"attention_bias", false}, {"attention_dropout", 0.0}, {"tie_word_embeddings", false},
          {"bos_token_id", 0}, {"eos_token_id", 1}, {"pretraining_tp", 1}, {"use_cache", true},
          {"quantization_config", {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                   {"weight_block_size", {128, 128}}}},
          {"torch_dtype", "bfloat16"}, {"transformers_version", "4.33.1"}};
}

TEST(ModelConfig, DeepseekV3AsShipped) {
  auto c = parse(deepseek_v3_config());
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->architecture, Architecture::deepseek_v3);
  ASSERT_TRUE(c->deepseek_v3.has_value());
  const DeepseekV3Config& ds = *c->deepseek_v3;
  EXPECT_EQ(ds.q_lora_rank, 1536);
  EXPECT_EQ(ds.kv_lora_rank, 512);
  EXPECT_EQ(ds.qk_head_dim(), 192);
  EXPECT_EQ(ds.latent_cache_dim(), 576);
  EXPECT_EQ(ds.v_head_dim, 128);
  EXPECT_TRUE(ds.rope_interleave);
  EXPECT_EQ(ds.n_routed_experts, 256);
  EXPECT_EQ(ds.num_experts_per_tok, 8);
  EXPECT_EQ(ds.n_group, 8);
  EXPECT_EQ(ds.topk_group, 4);
  EXPECT_FLOAT_EQ(ds.routed_scaling_factor, 2.5f);
  EXPECT_EQ(ds.num_nextn_predict_layers, 1);
  EXPECT_FALSE(ds.is_moe_layer(2));
  EXPECT_TRUE(ds.is_moe_layer(3));
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->intermediate_size, 18432);
  ASSERT_TRUE(c->rope_yarn.has_value());
  EXPECT_FLOAT_EQ(c->rope_yarn->factor, 40.0f);
  EXPECT_EQ(c->rope_yarn->original_max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(c->rope_yarn->mscale_all_dim, 1.0f);
  ASSERT_TRUE(c->fp8.has_value());
  EXPECT_EQ(c->fp8->block_rows, 128);
  EXPECT_EQ(c->fp8->block_cols, 128);
}

TEST(ModelConfig, DeepseekV3NullQLoraAndTransformers5Spelling) {
  json j = deepseek_v3_config();
  j["q_lora_rank"] = nullptr;
  j.erase("quantization_config");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 40.0}, {"mscale", 0.707},
                          {"mscale_all_dim", 0.707}, {"original_max_position_embeddings", 4096},
                          {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"truncate", false}};
  j["head_dim"] = 64;  // transformers writes these two when it saves
  j["qk_head_dim"] = 192;
  j["rope_interleave"] = false;
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_FALSE(c->deepseek_v3->q_lora_rank.has_value());
  EXPECT_FALSE(c->deepseek_v3->rope_interleave);
  EXPECT_FALSE(c->fp8.has_value());
  EXPECT_FALSE(c->rope_yarn->truncate);
  EXPECT_FLOAT_EQ(c->rope_yarn->mscale, 0.707f);
}

TEST(ModelConfig, DeepseekV3RejectsWhatItCannotRun) {
  auto with = [](const char* key, json value) {
    json j = deepseek_v3_config();
    j[key] = std::move(value);
    return j;
  };
  expect_error_mentions(with("moe_layer_freq", 2), "moe_layer_freq");
  expect_error_mentions(with("scoring_func", "softmax"), "scoring_func");
  expect_error_mentions(with("topk_method", "greedy"), "topk_method");
  expect_error_mentions(with("num_key_value_heads", 1), "num_key_value_heads");
  expect_error_mentions(with("n_group", 7), "n_group");
  expect_error_mentions(with("topk_group", 9), "topk_group");
  expect_error_mentions(with("num_experts_per_tok", 129), "num_experts_per_tok");
  expect_error_mentions(with("qk_head_dim", 128), "qk_head_dim");
  expect_error_mentions(with("kv_lora_rank", nullptr), "kv_lora_rank");
  expect_error_mentions(with("some_new_field", 1), "some_new_field");
  expect_error_mentions(with("quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}},
                                                     {"fmt", "e5m2"}}),
                        "fmt");
  expect_error_mentions(with("quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}},
                                                     {"ignored_layers", json::array()}}),
                        "ignored_layers");
  expect_error_mentions(with("quantization_config", {{"quant_method", "awq"}}), "quant_method");
  expect_error_mentions(with("quantization_config", {{"quant_method", "fp8"}}), "weight_block_size");
  json yarn_key = deepseek_v3_config();
  yarn_key["rope_scaling"]["extrapolation"] = 1;
  expect_error_mentions(yarn_key, "extrapolation");
  json yarn_factor = deepseek_v3_config();
  yarn_factor["max_position_embeddings"] = 8192;
  expect_error_mentions(yarn_factor, "factor");
}

TEST(ModelConfig, MissingFileNamesThePath) {
  auto c = load_model_config("/nonexistent/model");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("/nonexistent/model/config.json"), std::string::npos);
}

}  // namespace
}  // namespace sluice
