// A dense profile from a Hugging Face model directory, through the model
// module's config.json parser (which rejects fields it does not understand).
#include <string>

#include "sluice/model/config.h"
#include "sluice/sim/model_profile.h"

namespace sluice::sim {

namespace {

ModelProfile deepseek_v3_profile(const std::string& dir, const ModelConfig& config) {
  const DeepseekV3Config& ds = *config.deepseek_v3;
  DeepseekV3ProfileShape shape{.name = dir,
                               .num_layers = config.num_layers,
                               .num_dense_layers = ds.first_k_dense_replace,
                               .hidden_size = config.hidden_size,
                               .num_attention_heads = config.num_heads,
                               .q_lora_rank = ds.q_lora_rank.value_or(0),
                               .kv_lora_rank = ds.kv_lora_rank,
                               .qk_nope_head_dim = ds.qk_nope_head_dim,
                               .qk_rope_head_dim = ds.qk_rope_head_dim,
                               .v_head_dim = ds.v_head_dim,
                               .intermediate_size = config.intermediate_size,
                               .moe_intermediate_size = ds.moe_intermediate_size,
                               .num_routed_experts = ds.n_routed_experts,
                               .num_experts_per_token = ds.num_experts_per_tok,
                               .num_shared_experts = ds.n_shared_experts,
                               .vocab_size = config.vocab_size,
                               .max_position_embeddings = config.max_position_embeddings,
                               .linear_weight_bytes = config.fp8 ? 1.0 : 2.0};
  ModelProfile profile = make_deepseek_v3_profile(shape);
  profile.source = dir + "/config.json (deepseek_v3, " + (config.fp8 ? "fp8" : "bf16") +
                   " weights, latent KV cache in bf16; costs assumed from shapes, not measured)";
  return profile;
}

}  // namespace

Result<ModelProfile> profile_from_hf_dir(const std::string& dir) {
  SLUICE_TRY_ASSIGN(config, load_model_config(dir));
  if (config.architecture == Architecture::deepseek_v3) return deepseek_v3_profile(dir, config);
  if (config.architecture == Architecture::deepseek_v4) {
    ModelProfile profile = make_deepseek_v4_profile(dir, config);
    profile.source = dir + "/config.json (deepseek_v4, " + (config.fp8 ? "fp8" : "bf16") +
                     " weights; KV as its paged layout stores it with CUDA's fp8_ds_mla records and FP8 index keys; "
                     "costs from shapes at the efficiencies its kernels were measured at on the H200)";
    return profile;
  }
  DenseShape shape;
  shape.name = dir;
  shape.num_layers = config.num_layers;
  shape.hidden_size = config.hidden_size;
  shape.num_attention_heads = config.num_heads;
  shape.num_kv_heads = config.num_kv_heads;
  shape.head_dim = config.head_dim;
  shape.intermediate_size = config.intermediate_size;
  shape.vocab_size = config.vocab_size;
  shape.max_position_embeddings = config.max_position_embeddings;
  shape.tie_word_embeddings = config.tie_word_embeddings;
  shape.dtype_bytes = 2;  // served in bf16 whatever the checkpoint's dtype
  ModelProfile profile = make_dense_profile(shape);
  profile.source = dir + "/config.json (" + architecture_name(config.architecture) + ", served in bf16)";
  return profile;
}


}  // namespace sluice::sim
