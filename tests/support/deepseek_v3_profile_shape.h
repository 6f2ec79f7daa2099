// DeepSeek-V3's published shape as the simulator's profile input, for the
// tests that price it (there is no checkpoint in the repository, only its shape).
#pragma once

#include <cstdint>

#include "sluice/sim/model_profile.h"

namespace sluice::testing {

// DeepSeek-V3 (hidden 7168, 128 heads, q_lora 1536, latent 512 + rope 64, 256
// experts top-8 of moe_intermediate 2048 and one shared, FP8 linears), cut to
// `layers` layers of which the first `dense_layers` are dense (the published
// model: 61 and 3).
inline sim::DeepseekV3ProfileShape deepseek_v3_shape(std::int32_t layers, std::int32_t dense_layers) {
  return {.name = "deepseek-v3",
          .num_layers = layers,
          .num_dense_layers = dense_layers,
          .hidden_size = 7168,
          .num_attention_heads = 128,
          .q_lora_rank = 1536,
          .kv_lora_rank = 512,
          .qk_nope_head_dim = 128,
          .qk_rope_head_dim = 64,
          .v_head_dim = 128,
          .intermediate_size = 18432,
          .moe_intermediate_size = 2048,
          .num_routed_experts = 256,
          .num_experts_per_token = 8,
          .num_shared_experts = 1,
          .vocab_size = 129280,
          .max_position_embeddings = 163840,
          .linear_weight_bytes = 1,
          .dtype_bytes = 2};
}

}  // namespace sluice::testing
