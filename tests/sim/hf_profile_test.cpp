// A profile read from a Hugging Face config.json equals the built-in profile
// of the same shape, and configs the planner cannot model are rejected.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../support/deepseek_v4_flash_config.h"

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

// deepseek-ai/DeepSeek-V3's config.json, as published.
constexpr const char* kDeepseekV3Config = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}, "aux_loss_alpha": 0.001,
  "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
  "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
  "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"}, "rope_theta": 10000,
  "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true, "tie_word_embeddings": false,
  "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.33.1",
  "use_cache": true, "v_head_dim": 128, "vocab_size": 129280
})";

// The published sizes: 671B parameters (without the MTP layer), 37B active
// per token, and a latent KV cache of 576 bf16 values per token per layer
// (61 x 1152 = 70,272 bytes).
TEST(HfProfile, DeepseekV3ConfigHasItsPublishedSizes) {
  auto profile = profile_from_hf_dir(write_model_dir("deepseek_v3", kDeepseekV3Config));
  ASSERT_TRUE(profile.ok()) << profile.error_message();
  EXPECT_NEAR(static_cast<double>(profile->total_params()), 671.03e9, 0.01e9);
  EXPECT_NEAR(static_cast<double>(profile->active_params_per_output_token()), 37e9, 1e9);
  EXPECT_DOUBLE_EQ(profile->kv_bytes_per_token, 70272.0);
  EXPECT_EQ(profile->num_kv_heads, 1);
  EXPECT_EQ(profile->num_routed_experts(), 256);
  EXPECT_TRUE(profile->gemm_uses_fp8);
  // FP8 experts: about one byte per parameter.
  EXPECT_NEAR(profile->gpu_weight_bytes(), 671e9, 10e9);
}

// DeepSeek-V4-Flash's published sizes (284B parameters, 13B active) and its
// KV cache as the paged layout stores it with CUDA's records (the hand
// derivation is in docs/kv-v4.md): 21 CSA layers x (584 + 132) / 4 + 20 HCA
// layers x 584 / 128 = 3850.25 B per token; per sequence, 43 window rings of
// 128 x 584 B and the compressors' open-entry pool states in f32 (3 x dim
// each: CSA 2 x 512, its indexer 2 x 128; HCA 1 x 512).
// Planning and serving take it (at its kernels' measured efficiencies:
// tests/sim/deepseek_v4_cost_test.cpp).
TEST(HfProfile, DeepseekV4FlashPlansItsKvLayout) {
  const std::string dir = write_model_dir("deepseek_v4_flash", testing::deepseek_v4_flash_config_json().dump());
  auto profile = profile_from_hf_dir(dir);
  ASSERT_TRUE(profile.ok()) << profile.error_message();
  EXPECT_NEAR(static_cast<double>(profile->total_params()), 284e9, 1e9);
  EXPECT_NEAR(static_cast<double>(profile->active_params_per_output_token()), 13e9, 0.5e9);
  EXPECT_DOUBLE_EQ(profile->kv_bytes_per_token, 3850.25);
  EXPECT_EQ(profile->kv_window_tokens, 128);
  EXPECT_DOUBLE_EQ(profile->kv_state_bytes_per_sequence,
                   43.0 * 128 * 584 + 4.0 * (21 * (2 * 3 * 512 + 2 * 3 * 128) + 20 * 3 * 512));
  EXPECT_EQ(profile->kv_block_alignment_tokens, 128);
  EXPECT_EQ(profile->max_tensor_parallel, 8);
  EXPECT_TRUE(profile->deepseek_v4_kernels);
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
