// ModelConfig: a Hugging Face config.json for the dense Llama family, parsed
// and checked. Every field either takes effect or is rejected by name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sluice/common/result.h"

namespace sluice {

enum class Architecture { llama, mistral, qwen2, qwen3 };

const char* architecture_name(Architecture arch);
std::optional<Architecture> parse_architecture(std::string_view model_type);

struct Llama3RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  std::int32_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture architecture = Architecture::llama;
  std::int32_t vocab_size = 0;
  std::int32_t hidden_size = 0;
  std::int32_t intermediate_size = 0;
  std::int32_t num_layers = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  std::optional<Llama3RopeScaling> rope_llama3;
  std::int32_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projection bias (always on for qwen2)
  bool qk_norm = false;         // per-head RMSNorm of q and k (qwen3)
  std::optional<std::int32_t> bos_token_id;
  std::vector<std::int32_t> eos_token_ids;

  std::int64_t q_size() const { return std::int64_t{num_heads} * head_dim; }
  std::int64_t kv_size() const { return std::int64_t{num_kv_heads} * head_dim; }
};

// Parses config.json text; `origin` names the file in error messages.
Result<ModelConfig> parse_model_config(std::string_view json_text, const std::string& origin);
Result<ModelConfig> load_model_config(const std::string& model_dir);

}  // namespace sluice
