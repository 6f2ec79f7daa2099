// A profile read from a Hugging Face config.json equals the built-in profile
// of the same shape, and configs the planner cannot model are rejected.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sluice/sim/model_profile.h"
#include "sluice/sim/roofline_cost_model.h"

namespace sluice::sim {
namespace {

// Meta-Llama-3-8B's config.json, as published.
constexpr const char* kLlama3_8bConfig = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "use_cache": true, "vocab_size": 128256
})";

std::string write_model_dir(const std::string& name, const std::string& config) {
  const std::string dir = std::string(SLUICE_BINARY_DIR) + "/sim_hf_profile_" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config;
  return dir;
}

TEST(HfProfile, Llama3ConfigMatchesTheBuiltInProfile) {
  auto from_config = profile_from_hf_dir(write_model_dir("llama3", kLlama3_8bConfig));
  ASSERT_TRUE(from_config.ok()) << from_config.error_message();
  const ModelProfile builtin = *find_profile("llama-3-8b");
  EXPECT_EQ(from_config->total_params(), builtin.total_params());
  EXPECT_EQ(from_config->active_params_per_output_token(), builtin.active_params_per_output_token());
  EXPECT_DOUBLE_EQ(from_config->kv_bytes_per_token, builtin.kv_bytes_per_token);
  EXPECT_EQ(from_config->max_position_embeddings, 131072);
  const RooflineCostModel a(*from_config, h200(), {});
  const RooflineCostModel b(builtin, h200(), {});
  const StepShape shape{.sequences = {{.num_new_tokens = 2048, .num_computed_tokens = 10000},
                                      {.num_new_tokens = 1, .num_computed_tokens = 5000}}};
  EXPECT_DOUBLE_EQ(a.predict_step_ms(shape), b.predict_step_ms(shape));
}

TEST(HfProfile, RejectsWhatItCannotModel) {
  std::string moe = kLlama3_8bConfig;
  moe.replace(moe.find("\"llama\""), 7, "\"mixtral\"");
  EXPECT_FALSE(profile_from_hf_dir(write_model_dir("mixtral", moe)).ok());
  EXPECT_FALSE(profile_from_hf_dir(write_model_dir("broken", "{ not json")).ok());
  EXPECT_FALSE(profile_from_hf_dir(std::string(SLUICE_BINARY_DIR) + "/no-such-model-dir").ok());
}

}  // namespace
}  // namespace sluice::sim
