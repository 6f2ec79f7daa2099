// A dense profile from a Hugging Face config.json. Only the shape fields the
// cost model needs are read; the full loader (model/config.h) validates the
// rest when the model is actually run.
#include <nlohmann/json.hpp>

#include <string>

#include "sluice/backend/sim/model_profile.h"
#include "sluice/common/io.h"

namespace sluice::sim {
namespace {

Result<std::int32_t> positive_int(const nlohmann::json& config, const char* key, const std::string& origin) {
  const auto it = config.find(key);
  if (it == config.end() || !it->is_number_integer() || it->get<std::int64_t>() <= 0 ||
      it->get<std::int64_t>() > INT32_MAX) {
    return Error{origin + ": \"" + key + "\" must be a positive integer"};
  }
  return it->get<std::int32_t>();
}

}  // namespace

Result<ModelProfile> profile_from_hf_dir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  SLUICE_TRY_ASSIGN(text, read_file(path));
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return Error{path + ": not a JSON object"};
  const std::string model_type = config.value("model_type", std::string());
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2" && model_type != "qwen3") {
    return Error{path + ": model_type \"" + model_type +
                 "\" has no planner profile (supported: llama, mistral, qwen2, qwen3; or use --profile)"};
  }
  DenseShape shape;
  shape.name = dir;
  SLUICE_TRY_ASSIGN(layers, positive_int(config, "num_hidden_layers", path));
  SLUICE_TRY_ASSIGN(hidden, positive_int(config, "hidden_size", path));
  SLUICE_TRY_ASSIGN(heads, positive_int(config, "num_attention_heads", path));
  SLUICE_TRY_ASSIGN(intermediate, positive_int(config, "intermediate_size", path));
  SLUICE_TRY_ASSIGN(vocab, positive_int(config, "vocab_size", path));
  SLUICE_TRY_ASSIGN(positions, positive_int(config, "max_position_embeddings", path));
  shape.num_layers = layers;
  shape.hidden_size = hidden;
  shape.num_attention_heads = heads;
  shape.intermediate_size = intermediate;
  shape.vocab_size = vocab;
  shape.max_position_embeddings = positions;
  shape.num_kv_heads = heads;
  if (config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()) {
    SLUICE_TRY_ASSIGN(kv_heads, positive_int(config, "num_key_value_heads", path));
    shape.num_kv_heads = kv_heads;
  }
  if (heads % shape.num_kv_heads != 0) return Error{path + ": num_attention_heads not a multiple of num_key_value_heads"};
  shape.head_dim = hidden / heads;
  if (config.contains("head_dim") && !config["head_dim"].is_null()) {
    SLUICE_TRY_ASSIGN(head_dim, positive_int(config, "head_dim", path));
    shape.head_dim = head_dim;
  }
  shape.tie_word_embeddings = config.value("tie_word_embeddings", false);
  const std::string dtype = config.value("torch_dtype", config.value("dtype", std::string("bfloat16")));
  if (dtype == "float32") {
    shape.dtype_bytes = 4;
  } else if (dtype == "bfloat16" || dtype == "float16") {
    shape.dtype_bytes = 2;
  } else {
    return Error{path + ": torch_dtype \"" + dtype + "\" is not planned for (bfloat16, float16, float32)"};
  }
  ModelProfile profile = make_dense_profile(shape);
  profile.source = path;
  return profile;
}

}  // namespace sluice::sim
