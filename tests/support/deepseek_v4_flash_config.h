// DeepSeek-V4-Flash's config.json, for the tests that parse, lay out or
// plan it (there is no checkpoint in the repository, only its shape).
#pragma once

#include <nlohmann/json.hpp>

namespace sluice::testing {

// DeepSeek-V4-Flash's config.json (43 layers: 2 sliding, then CSA and HCA
// alternating; hidden 4096, 64 heads x 512) in DeepSeek's own spelling:
// per-layer compress_ratios (one entry more than layers, as the MTP layer
// adds), num_hash_layers, qk_rope_head_dim, a flat rope_scaling for the
// compress rope, ue8m0 FP8 scales.
inline nlohmann::json deepseek_v4_flash_config_json() {
  nlohmann::json ratios = nlohmann::json::array({0, 0});
  for (int i = 2; i < 43; ++i) ratios.push_back(i % 2 == 0 ? 4 : 128);
  ratios.push_back(0);
  return {{"model_type", "deepseek_v4"}, {"architectures", {"DeepseekV4ForCausalLM"}},
          {"vocab_size", 129280}, {"hidden_size", 4096}, {"moe_intermediate_size", 2048},
          {"num_hidden_layers", 43}, {"num_attention_heads", 64}, {"num_key_value_heads", 1},
          {"head_dim", 512}, {"q_lora_rank", 1024}, {"qk_rope_head_dim", 64}, {"o_groups", 8},
          {"o_lora_rank", 1024}, {"n_routed_experts", 256}, {"n_shared_experts", 1}, {"num_experts_per_tok", 6},
          {"num_hash_layers", 3}, {"scoring_func", "sqrtsoftplus"}, {"norm_topk_prob", true},
          {"routed_scaling_factor", 1.5}, {"swiglu_limit", 10.0}, {"sliding_window", 128},
          {"index_n_heads", 64}, {"index_head_dim", 128}, {"index_topk", 512}, {"hc_mult", 4},
          {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6}, {"compress_ratios", ratios},
          {"compress_rope_theta", 160000}, {"rope_theta", 10000}, {"max_position_embeddings", 1048576},
          {"rope_scaling", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                            {"beta_fast", 32}, {"beta_slow", 1}}},
          {"rms_norm_eps", 1e-6}, {"num_nextn_predict_layers", 1}, {"expert_dtype", "fp4"},
          {"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                                   {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}}},
          {"bos_token_id", 0}, {"eos_token_id", 1}, {"torch_dtype", "bfloat16"}};
}

}  // namespace sluice::testing
