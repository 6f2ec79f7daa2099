// make-model: writes a random-weight Hugging Face model directory (config.json,
// safetensors, tokenizer files, generation_config.json), bit-for-bit
// reproducible from the seed. Used for tests, goldens and the built-in default.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <string>

#include "sluice/backend/tensor.h"
#include "sluice/common/result.h"
#include "sluice/model/config.h"

namespace sluice {

// The DeepSeek-V3 shape (--arch deepseek_v3); the defaults are a tiny model.
struct DeepseekV3Shape {
  std::int32_t q_lora_rank = 48;  // 0 = null: q_proj straight from the hidden state
  std::int32_t kv_lora_rank = 32;
  std::int32_t qk_nope_head_dim = 16;
  std::int32_t qk_rope_head_dim = 8;
  std::int32_t v_head_dim = 16;
  std::int32_t n_routed_experts = 8;
  std::int32_t num_experts_per_tok = 2;
  std::int32_t n_shared_experts = 1;
  std::int32_t moe_intermediate_size = 32;
  std::int32_t first_k_dense_replace = 1;
  std::int32_t n_group = 2;
  std::int32_t topk_group = 1;
  float routed_scaling_factor = 2.5f;
  // YaRN over max_position_embeddings / yarn_factor original positions; 0 = plain rope.
  float yarn_factor = 4.0f;
  float yarn_mscale = 1.0f;
  float yarn_mscale_all_dim = 1.0f;
  std::int32_t mtp_layers = 0;  // num_nextn_predict_layers, their tensors written after the decoder's
};

// The DeepSeek-V4 shape (--arch deepseek_v4); the defaults are a tiny model
// with every attention kind, hash and top-k MoE layers and windows short
// enough that a few hundred tokens cross many of them.
struct DeepseekV4Shape {
  std::int32_t q_lora_rank = 32;
  std::int32_t qk_rope_head_dim = 8;
  std::int32_t o_groups = 2;
  std::int32_t o_lora_rank = 16;
  // One letter per layer: s (sliding_attention), c (CSA), h (HCA); repeated
  // to --layers; NUL-terminated, all NUL = "sch". A char array, not a
  // std::string: GCC 12 reports a string here maybe-uninitialized wherever
  // MakeModelOptions is designated-initialized.
  std::array<char, 64> layer_types{};
  std::string_view layer_types_or_default() const {
    const std::string_view given(layer_types.data());
    return given.empty() ? std::string_view("sch") : given;
  }
  std::int32_t csa_compress_rate = 4;
  std::int32_t hca_compress_rate = 16;
  std::int32_t sliding_window = 8;
  std::int32_t index_n_heads = 16;  // many heads: a score is 0 (a tie) only when every head's ReLU is
  std::int32_t index_head_dim = 16;
  std::int32_t index_topk = 4;
  std::int32_t hc_mult = 4;
  std::int32_t hc_sinkhorn_iters = 20;
  std::int32_t num_hash_layers = 1;
  std::int32_t n_routed_experts = 8;
  std::int32_t num_experts_per_tok = 2;
  std::int32_t moe_intermediate_size = 32;
  float routed_scaling_factor = 1.5f;
  float swiglu_limit = 10.0f;
  float rope_theta = 10000.0f;
  float compress_rope_theta = 160000.0f;
  // YaRN on the compress rope over max_position_embeddings / yarn_factor original positions; 0 = none.
  float yarn_factor = 0.0f;
  std::int32_t mtp_layers = 0;  // num_nextn_predict_layers, written as mtp.* tensors
  // With dtype f8_e4m3: routed experts in FP8 128x128 blocks (expert_dtype
  // fp8, the -Base checkpoints' layout) instead of FP4.
  bool fp8_experts = false;
};

struct MakeModelOptions {
  Architecture architecture = Architecture::llama;
  std::int32_t num_layers = 2;
  std::int32_t hidden_size = 64;
  std::int32_t num_heads = 4;
  std::int32_t num_kv_heads = 2;    // dense family only (MLA has one key per head)
  std::int32_t intermediate_size = 128;  // the dense MLP (deepseek_v3: its first_k_dense_replace layers)
  std::int32_t vocab_size = 512;
  std::int32_t head_dim = 0;  // 0 = hidden / heads
  std::uint64_t seed = 0;
  // bf16 | f32 | f8_e4m3 (deepseek_v3 and deepseek_v4: linear weights in
  // float8 with 128x128 block scales, the rest bf16, as DeepSeek ships them;
  // deepseek_v4 also writes its routed experts in FP4, model/fp4_weights.h).
  DType dtype = DType::bf16;
  std::int32_t max_position_embeddings = 4096;
  std::int32_t num_shards = 1;  // > 1: model-0000i-of-0000n.safetensors + model.safetensors.index.json
  DeepseekV3Shape deepseek_v3;
  DeepseekV4Shape deepseek_v4;  // --arch deepseek_v4; head_dim 0 = 32
  std::string out_dir;
};

Status make_model(const MakeModelOptions& options);

}  // namespace sluice
