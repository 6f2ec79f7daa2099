// ModelConfig: a Hugging Face config.json, parsed and checked: the dense Llama
// family, DeepSeek-V3 (MLA attention, DeepSeekMoE, FP8 block weights) and
// DeepSeek-V4 (compressed sparse attention, hyper-connections, hash routing).
// Every field either takes effect or is rejected by name.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sluice/common/result.h"

namespace sluice {

enum class Architecture { llama, mistral, qwen2, qwen3, deepseek_v3, deepseek_v4 };

const char* architecture_name(Architecture arch);
std::optional<Architecture> parse_architecture(std::string_view model_type);

struct Llama3RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  std::int32_t original_max_position_embeddings = 8192;
};

// YaRN (rope_type "yarn"), as transformers' _compute_yarn_parameters reads it.
struct YarnRopeScaling {
  // The interpolation factor. transformers takes max_position_embeddings /
  // original_max_position_embeddings instead when the latter is given, so the
  // parser requires the two to agree (DeepSeek-V3: 163840 / 4096 = 40).
  float factor = 1.0f;
  std::int32_t original_max_position_embeddings = 4096;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 0.0f;          // 0 = absent
  float mscale_all_dim = 0.0f;  // 0 = absent; also scales the softmax (DeepSeek)
  std::optional<float> attention_factor;  // cos/sin multiplier; derived from mscale when absent
  bool truncate = true;         // round the correction range to whole dimensions
};

// quantization_config {quant_method: fp8, fmt: e4m3, weight_block_size: [r, c],
// activation_scheme: dynamic}: linear weights stored as float8 e4m3 with a
// `<name>_scale_inv` f32 tensor of one multiplier per [r, c] block.
struct Fp8BlockQuantization {
  std::int32_t block_rows = 128;
  std::int32_t block_cols = 128;
};

// The DeepSeek-V3 fields (transformers' DeepseekV3Config and the checkpoint's
// own config.json, which adds moe_layer_freq, scoring_func, topk_method and
// num_nextn_predict_layers).
struct DeepseekV3Config {
  std::optional<std::int32_t> q_lora_rank;  // nullopt: q_proj straight from the hidden state
  std::int32_t kv_lora_rank = 512;
  std::int32_t qk_nope_head_dim = 128;
  std::int32_t qk_rope_head_dim = 64;
  std::int32_t v_head_dim = 128;
  bool rope_interleave = true;  // the rope dims come in (even, odd) pairs

  std::int32_t n_routed_experts = 256;
  std::int32_t num_experts_per_tok = 8;
  std::int32_t n_shared_experts = 1;
  std::int32_t moe_intermediate_size = 2048;
  std::int32_t first_k_dense_replace = 3;  // layers [0, k) have a dense MLP, the rest MoE
  std::int32_t n_group = 8;                // experts are split into n_group groups ...
  std::int32_t topk_group = 4;             // ... and each token picks from its topk_group best
  bool norm_topk_prob = true;
  float routed_scaling_factor = 2.5f;

  // Multi-token-prediction layers stored after the decoder layers
  // (model.layers.{num_hidden_layers + i}.*); not run.
  std::int32_t num_nextn_predict_layers = 0;

  std::int32_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // One cached entry per token per layer: the compressed latent and the shared rope key.
  std::int32_t latent_cache_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  bool is_moe_layer(std::int32_t layer) const { return layer >= first_k_dense_replace; }
};

// DeepSeek-V4's attention kinds (transformers' layer_types). Every kind keeps
// a sliding window of recent tokens; the compressed kinds add one entry per
// window of compress-rate tokens.
enum class DeepseekV4Attention : std::uint8_t {
  sliding,             // "sliding_attention": the window only, main rope
  compressed_sparse,   // "compressed_sparse_attention" (CSA): overlapping windows, top-k by the lightning indexer
  heavily_compressed,  // "heavily_compressed_attention" (HCA): disjoint windows, every entry attended
};

// DeepSeek-V4's MoE routers (transformers' mlp_layer_types).
enum class DeepseekV4Mlp : std::uint8_t {
  hash_moe,  // "hash_moe": experts from the frozen tid2eid[token id] table, weights from the router scores
  moe,       // "moe": top-k of the router scores plus the selection-only correction bias
};

// One of V4's two rotary embeddings (rope_parameters.main / .compress).
struct DeepseekV4Rope {
  float theta = 10000.0f;
  std::optional<YarnRopeScaling> yarn;  // rope_type "yarn"
  float cos_sin_scale = 1.0f;           // YaRN's attention factor (V4 forces 1.0 when it is absent)
};

// The DeepSeek-V4 fields, as transformers' DeepseekV4Config defines them after
// folding in the legacy spellings (compress_ratios, compress_rate_csa/_hca,
// num_hash_layers, qk_rope_head_dim, a flat rope_scaling). ModelConfig holds
// the shared ones: head_dim (512, also the K=V latent width), num_kv_heads = 1,
// intermediate_size = moe_intermediate_size (the shared expert's width).
struct DeepseekV4Config {
  std::int32_t q_lora_rank = 1024;
  std::int32_t qk_rope_head_dim = 64;  // the last dims of each head, interleaved pairs
  std::int32_t o_groups = 8;           // grouped output projection: heads in o_groups groups ...
  std::int32_t o_lora_rank = 1024;     // ... each projected to o_lora_rank, then o_b_proj to hidden

  std::vector<DeepseekV4Attention> layer_types;  // [num_layers]
  std::int32_t csa_compress_rate = 4;            // compress_rates.compressed_sparse_attention
  std::int32_t hca_compress_rate = 128;          // compress_rates.heavily_compressed_attention
  std::int32_t sliding_window = 128;             // tokens, the current one included
  std::int32_t index_n_heads = 64;
  std::int32_t index_head_dim = 128;
  std::int32_t index_topk = 512;  // compressed entries each CSA query keeps

  std::int32_t hc_mult = 4;  // residual streams (mHC)
  std::int32_t hc_sinkhorn_iters = 20;
  float hc_eps = 1e-6f;

  std::vector<DeepseekV4Mlp> mlp_layer_types;  // [num_layers]
  std::int32_t n_routed_experts = 256;
  std::int32_t num_experts_per_tok = 6;
  std::int32_t moe_intermediate_size = 2048;  // routed and shared experts
  float routed_scaling_factor = 1.5f;
  float swiglu_limit = 10.0f;  // gate <= limit, |up| <= limit, routed and shared experts

  DeepseekV4Rope main_rope;      // sliding layers
  DeepseekV4Rope compress_rope;  // CSA/HCA layers, their compressors and indexers

  std::int32_t num_nextn_predict_layers = 1;  // MTP layers (mtp.* tensors); not run
  bool fp4_experts = false;  // expert_dtype "fp4": routed experts as e2m1 pairs, E8M0 per 32 inputs (fp4_weights.h)

  std::int32_t compress_rate(DeepseekV4Attention type) const {
    return type == DeepseekV4Attention::compressed_sparse    ? csa_compress_rate
           : type == DeepseekV4Attention::heavily_compressed ? hca_compress_rate
                                                             : 0;
  }
};

struct ModelConfig {
  Architecture architecture = Architecture::llama;
  std::int32_t vocab_size = 0;
  std::int32_t hidden_size = 0;
  std::int32_t intermediate_size = 0;
  std::int32_t num_layers = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;  // deepseek_v3: qk_rope_head_dim, as transformers sets it; deepseek_v4: the latent
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  std::optional<Llama3RopeScaling> rope_llama3;
  std::optional<YarnRopeScaling> rope_yarn;
  std::int32_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projection bias (always on for qwen2)
  bool qk_norm = false;         // per-head RMSNorm of q and k (qwen3)
  std::optional<std::int32_t> bos_token_id;
  std::vector<std::int32_t> eos_token_ids;
  std::optional<DeepseekV3Config> deepseek_v3;  // set iff architecture == deepseek_v3
  // Set iff architecture == deepseek_v4; shared and immutable (an optional of
  // it trips GCC 12's maybe-uninitialized in every ModelConfig destructor).
  std::shared_ptr<const DeepseekV4Config> deepseek_v4;
  std::optional<Fp8BlockQuantization> fp8;      // quantization_config, when present

  std::int64_t q_size() const { return std::int64_t{num_heads} * head_dim; }
  std::int64_t kv_size() const { return std::int64_t{num_kv_heads} * head_dim; }
};

// Parses config.json text; `origin` names the file in error messages.
Result<ModelConfig> parse_model_config(std::string_view json_text, const std::string& origin);
Result<ModelConfig> load_model_config(const std::string& model_dir);

}  // namespace sluice
