#include "sluice/model/config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "sluice/common/io.h"
#include "sluice/model/config_reader.h"
#include "sluice/model/deepseek_v3_config.h"
#include "sluice/model/deepseek_v4_config.h"

namespace sluice {
namespace {

using nlohmann::json;

// Keys that describe the checkpoint but do not change the computation.
const std::set<std::string, std::less<>> kInformationalKeys = {
    "architectures", "torch_dtype", "dtype", "transformers_version", "initializer_range",
    "use_cache", "pad_token_id", "_name_or_path", "model_type", "attention_dropout",
    "max_window_layers", "bos_token_id", "eos_token_id", "output_attentions",
    "output_hidden_states", "return_dict", "is_encoder_decoder", "tokenizer_class",
};

// rope_scaling (transformers 4) or rope_parameters (transformers 5).
Status parse_rope(ConfigReader& reader, ModelConfig& config, const std::string& origin) {
  const json* parameters = reader.find("rope_parameters");
  const json* scaling = reader.find("rope_scaling");
  const char* key = parameters ? "rope_parameters" : "rope_scaling";
  const json* rope = parameters ? parameters : scaling;
  SLUICE_TRY_ASSIGN(theta, reader.positive_float_or("rope_theta", 10000.0f));
  config.rope_theta = theta;
  if (!rope) return Ok{};
  if (!rope->is_object()) return Error{fmt::format("{}: field '{}' must be an object", origin, key)};
  std::string type = rope->value("rope_type", rope->value("type", "default"));
  if (rope->contains("rope_theta")) config.rope_theta = (*rope)["rope_theta"].get<float>();
  if (type == "default") return Ok{};
  if (type == "yarn") {
    if (config.architecture != Architecture::deepseek_v3)
      return Error{fmt::format("{}: {}.rope_type 'yarn' is implemented for deepseek_v3 only", origin, key)};
    SLUICE_TRY_ASSIGN(yarn, parse_yarn_rope_scaling(*rope, origin + ": " + key, config.max_position_embeddings));
    config.rope_yarn = yarn;
    return Ok{};
  }
  if (type != "llama3")
    return Error{fmt::format("{}: {}.rope_type '{}' is not supported (supported: default, llama3, yarn)",
                             origin, key, type)};
  Llama3RopeScaling llama3;
  llama3.factor = rope->value("factor", llama3.factor);
  llama3.low_freq_factor = rope->value("low_freq_factor", llama3.low_freq_factor);
  llama3.high_freq_factor = rope->value("high_freq_factor", llama3.high_freq_factor);
  llama3.original_max_position_embeddings =
      rope->value("original_max_position_embeddings", llama3.original_max_position_embeddings);
  if (llama3.factor <= 0 || llama3.low_freq_factor <= 0 ||
      llama3.high_freq_factor <= llama3.low_freq_factor || llama3.original_max_position_embeddings <= 0)
    return Error{fmt::format("{}: {} has inconsistent llama3 scaling values", origin, key)};
  config.rope_llama3 = llama3;
  return Ok{};
}

}  // namespace

const char* architecture_name(Architecture arch) {
  switch (arch) {
    case Architecture::llama: return "llama";
    case Architecture::mistral: return "mistral";
    case Architecture::qwen2: return "qwen2";
    case Architecture::qwen3: return "qwen3";
    case Architecture::deepseek_v3: return "deepseek_v3";
    case Architecture::deepseek_v4: return "deepseek_v4";
  }
  return "?";
}

std::optional<Architecture> parse_architecture(std::string_view model_type) {
  for (auto arch : {Architecture::llama, Architecture::mistral, Architecture::qwen2, Architecture::qwen3,
                    Architecture::deepseek_v3, Architecture::deepseek_v4})
    if (model_type == architecture_name(arch)) return arch;
  return std::nullopt;
}

Result<ModelConfig> parse_model_config(std::string_view json_text, const std::string& origin) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    return Error{fmt::format("{}: not a JSON object", origin)};
  if (!root.contains("model_type") || !root["model_type"].is_string())
    return Error{fmt::format("{}: field 'model_type' is missing", origin)};
  const std::string model_type = root["model_type"].get<std::string>();
  auto arch = parse_architecture(model_type);
  if (!arch)
    return Error{fmt::format("{}: model_type '{}' is not supported (supported: llama, mistral, qwen2, qwen3, deepseek_v3, "
                             "deepseek_v4)",
                             origin, model_type)};
  if (*arch == Architecture::deepseek_v4) return parse_deepseek_v4_config(root, origin);

  ModelConfig config;
  config.architecture = *arch;
  const bool is_deepseek = config.architecture == Architecture::deepseek_v3;
  ConfigReader reader(root, origin, is_deepseek ? deepseek_v3_informational_keys() : kInformationalKeys);
  SLUICE_TRY_ASSIGN(vocab, reader.positive_int("vocab_size"));
  SLUICE_TRY_ASSIGN(hidden, reader.positive_int("hidden_size"));
  SLUICE_TRY_ASSIGN(intermediate, reader.positive_int("intermediate_size"));
  SLUICE_TRY_ASSIGN(layers, reader.positive_int("num_hidden_layers"));
  SLUICE_TRY_ASSIGN(heads, reader.positive_int("num_attention_heads"));
  SLUICE_TRY_ASSIGN(kv_heads, reader.positive_int_or("num_key_value_heads", heads));
  config.vocab_size = vocab;
  config.hidden_size = hidden;
  config.intermediate_size = intermediate;
  config.num_layers = layers;
  config.num_heads = heads;
  config.num_kv_heads = kv_heads;
  if (heads % kv_heads != 0)
    return reader.error("num_key_value_heads",
                        fmt::format("= {} must divide num_attention_heads = {}", kv_heads, heads));
  if (is_deepseek) {
    // MLA decompresses a key and a value per query head.
    if (kv_heads != heads)
      return reader.error("num_key_value_heads",
                          fmt::format("= {} must equal num_attention_heads = {} for MLA", kv_heads, heads));
  } else {
    if (hidden % heads != 0 && !root.contains("head_dim"))
      return reader.error("hidden_size", "must be a multiple of num_attention_heads when head_dim is absent");
    SLUICE_TRY_ASSIGN(head_dim, reader.positive_int_or("head_dim", hidden / heads));
    if (head_dim % 2 != 0) return reader.error("head_dim", "must be even for rotary embeddings");
    config.head_dim = head_dim;
  }
  SLUICE_TRY_ASSIGN(eps, reader.positive_float_or("rms_norm_eps", 1e-6f));
  config.rms_norm_eps = eps;
  SLUICE_TRY_ASSIGN(max_pos, reader.positive_int("max_position_embeddings"));
  config.max_position_embeddings = max_pos;
  SLUICE_TRY_ASSIGN(tied, reader.boolean_or("tie_word_embeddings", false));
  config.tie_word_embeddings = tied;
  if (is_deepseek) SLUICE_TRY(parse_deepseek_v3_fields(reader, config));
  SLUICE_TRY(parse_rope(reader, config, origin));

  const bool is_qwen2 = config.architecture == Architecture::qwen2;
  SLUICE_TRY_ASSIGN(bias, reader.boolean_or("attention_bias", is_qwen2));
  config.attention_bias = bias;
  config.qk_norm = config.architecture == Architecture::qwen3;

  SLUICE_TRY(reader.require_value("hidden_act", "silu", "only SiLU-gated MLPs are implemented"));
  SLUICE_TRY(reader.require_value("mlp_bias", false, "MLP bias is not implemented"));
  SLUICE_TRY(reader.require_value("pretraining_tp", 1, "tensor-parallel pretraining slices are not implemented"));
  // Qwen configs carry sliding_window with use_sliding_window = false: then it is moot.
  // Elsewhere a window shorter than the context would change attention: reject it.
  SLUICE_TRY(reader.require_value("use_sliding_window", false, "sliding-window attention is not implemented"));
  if (const json* window = reader.find("sliding_window"); window && !root.contains("use_sliding_window")) {
    if (!window->is_number_integer() || window->get<std::int64_t>() < config.max_position_embeddings)
      return reader.error("sliding_window", fmt::format("= {} is not supported: sliding-window attention is not implemented",
                                                        window->dump()));
  }
  if (const json* types = reader.find("layer_types")) {
    if (!types->is_array()) return reader.error("layer_types", "must be a list");
    for (const auto& t : *types)
      if (t != "full_attention")
        return reader.error("layer_types", fmt::format("contains {}: only full_attention is implemented", t.dump()));
  }

  SLUICE_TRY_ASSIGN(bos, reader.token_ids("bos_token_id"));
  if (!bos.empty()) config.bos_token_id = bos.front();
  SLUICE_TRY_ASSIGN(eos, reader.token_ids("eos_token_id"));
  config.eos_token_ids = eos;
  SLUICE_TRY(reader.reject_unknown_keys());
  return config;
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  SLUICE_TRY_ASSIGN(text, read_file(path));
  return parse_model_config(text, path);
}

}  // namespace sluice
