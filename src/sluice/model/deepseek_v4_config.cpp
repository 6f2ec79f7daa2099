#include "sluice/model/deepseek_v4_config.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "sluice/model/config_reader.h"
#include "sluice/model/deepseek_v3_config.h"

namespace sluice {
namespace {

using nlohmann::json;

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kCsa = "compressed_sparse_attention";
constexpr const char* kHca = "heavily_compressed_attention";

const std::set<std::string, std::less<>>& informational_keys() {
  static const std::set<std::string, std::less<>> keys = {
      "architectures", "torch_dtype", "dtype", "transformers_version", "initializer_range", "use_cache",
      "pad_token_id", "_name_or_path", "model_type", "attention_dropout", "output_attentions",
      "output_hidden_states", "return_dict", "is_encoder_decoder", "tokenizer_class", "auto_map",
      // Training only: the load-balancing loss and router noise (off at inference).
      "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
  };
  return keys;
}

// compress_rates (dict), then the legacy scalar overrides compress_rate_csa / _hca.
Status parse_compress_rates(ConfigReader& reader, DeepseekV4Config& ds) {
  if (const json* rates = reader.find("compress_rates")) {
    if (!rates->is_object()) return reader.error("compress_rates", "must be an object of layer type -> rate");
    for (const auto& [type, rate] : rates->items()) {
      if (!rate.is_number_integer() || rate.get<std::int64_t>() <= 0 || rate.get<std::int64_t>() > (1 << 20))
        return reader.error("compress_rates", fmt::format("['{}'] must be a positive integer", type));
      if (type == kCsa)
        ds.csa_compress_rate = rate.get<std::int32_t>();
      else if (type == kHca)
        ds.hca_compress_rate = rate.get<std::int32_t>();
      else
        return reader.error("compress_rates", fmt::format("has an unknown layer type '{}' (known: {}, {})", type,
                                                          kCsa, kHca));
    }
  }
  SLUICE_TRY_ASSIGN(csa, reader.positive_int_or("compress_rate_csa", ds.csa_compress_rate));
  SLUICE_TRY_ASSIGN(hca, reader.positive_int_or("compress_rate_hca", ds.hca_compress_rate));
  ds.csa_compress_rate = csa;
  ds.hca_compress_rate = hca;
  return Ok{};
}

Result<DeepseekV4Attention> attention_type(const json& value) {
  if (value == kSliding) return DeepseekV4Attention::sliding;
  if (value == kCsa) return DeepseekV4Attention::compressed_sparse;
  if (value == kHca) return DeepseekV4Attention::heavily_compressed;
  return Error{fmt::format("{} is not one of {}, {}, {}", value.dump(), kSliding, kCsa, kHca)};
}

// layer_types, else the legacy per-layer compress_ratios (0 / 4 / 128), else
// transformers' default (two HCA layers, then HCA and CSA alternating). Longer
// lists are cut to num_hidden_layers, as transformers cuts them.
Status parse_layer_types(ConfigReader& reader, std::int32_t num_layers, DeepseekV4Config& ds) {
  const json* types = reader.find("layer_types");
  const json* ratios = reader.find("compress_ratios");
  ds.layer_types.clear();
  if (types) {
    if (!types->is_array()) return reader.error("layer_types", "must be a list");
    for (const auto& t : *types) {
      auto type = attention_type(t);
      if (!type) return reader.error("layer_types", type.error_message());
      ds.layer_types.push_back(*type);
    }
  } else if (ratios) {
    if (!ratios->is_array()) return reader.error("compress_ratios", "must be a list");
    for (const auto& r : *ratios) {
      if (r == 0) ds.layer_types.push_back(DeepseekV4Attention::sliding);
      else if (r == 4) ds.layer_types.push_back(DeepseekV4Attention::compressed_sparse);
      else if (r == 128) ds.layer_types.push_back(DeepseekV4Attention::heavily_compressed);
      else return reader.error("compress_ratios", fmt::format("contains {}: transformers maps only 0, 4 and 128", r.dump()));
    }
  } else {
    for (std::int32_t i = 0; i < num_layers; ++i)
      ds.layer_types.push_back(i < 2 || (i - 2) % 2 == 0 ? DeepseekV4Attention::heavily_compressed
                                                         : DeepseekV4Attention::compressed_sparse);
  }
  if (ds.layer_types.size() > static_cast<std::size_t>(num_layers)) ds.layer_types.resize(num_layers);
  if (ds.layer_types.size() != static_cast<std::size_t>(num_layers))
    return reader.error(types ? "layer_types" : "compress_ratios",
                        fmt::format("has {} entries for num_hidden_layers = {}", ds.layer_types.size(), num_layers));
  return Ok{};
}

// mlp_layer_types, else num_hash_layers (default 3) hash layers then top-k ones.
Status parse_mlp_layer_types(ConfigReader& reader, std::int32_t num_layers, DeepseekV4Config& ds) {
  ds.mlp_layer_types.clear();
  SLUICE_TRY_ASSIGN(num_hash, reader.count_or("num_hash_layers", 3));
  if (const json* types = reader.find("mlp_layer_types")) {
    if (!types->is_array()) return reader.error("mlp_layer_types", "must be a list");
    for (const auto& t : *types) {
      if (t == "hash_moe") ds.mlp_layer_types.push_back(DeepseekV4Mlp::hash_moe);
      else if (t == "moe") ds.mlp_layer_types.push_back(DeepseekV4Mlp::moe);
      else return reader.error("mlp_layer_types", fmt::format("contains {}: known are hash_moe and moe", t.dump()));
    }
    if (ds.mlp_layer_types.size() > static_cast<std::size_t>(num_layers)) ds.mlp_layer_types.resize(num_layers);
    if (ds.mlp_layer_types.size() != static_cast<std::size_t>(num_layers))
      return reader.error("mlp_layer_types", fmt::format("has {} entries for num_hidden_layers = {}",
                                                         ds.mlp_layer_types.size(), num_layers));
    return Ok{};
  }
  for (std::int32_t i = 0; i < num_layers; ++i)
    ds.mlp_layer_types.push_back(i < num_hash ? DeepseekV4Mlp::hash_moe : DeepseekV4Mlp::moe);
  return Ok{};
}

// One rope of rope_parameters.{main, compress}: rope_type default or yarn.
Result<DeepseekV4Rope> parse_rope_entry(const json& entry, const std::string& where, float partial_rotary_factor,
                                        std::int32_t max_position_embeddings, bool force_unit_attention_factor) {
  if (!entry.is_object()) return Error{where + " must be an object"};
  DeepseekV4Rope rope;
  if (!entry.contains("rope_theta") || !entry["rope_theta"].is_number() || entry["rope_theta"].get<double>() <= 0)
    return Error{where + ".rope_theta must be a positive number"};
  rope.theta = entry["rope_theta"].get<float>();
  json rest = entry;
  rest.erase("rope_theta");
  if (rest.contains("partial_rotary_factor")) {
    if (!rest["partial_rotary_factor"].is_number() ||
        std::fabs(rest["partial_rotary_factor"].get<double>() - partial_rotary_factor) > 1e-9)
      return Error{fmt::format("{}.partial_rotary_factor must equal the model's ({})", where, partial_rotary_factor)};
    rest.erase("partial_rotary_factor");
  }
  const std::string type = rest.value("rope_type", rest.value("type", std::string("default")));
  if (type == "default") {
    for (const auto& [key, value] : rest.items())
      if (key != "rope_type" && key != "type")
        return Error{fmt::format("{}: field '{}' is not supported with rope_type default", where, key)};
    return rope;
  }
  if (type != "yarn") return Error{fmt::format("{}.rope_type '{}' is not supported (default, yarn)", where, type)};
  if (force_unit_attention_factor && !rest.contains("attention_factor")) rest["attention_factor"] = 1.0;
  SLUICE_TRY_ASSIGN(yarn, parse_yarn_rope_scaling(rest, where, max_position_embeddings));
  rope.cos_sin_scale = yarn_attention_factor(yarn);
  rope.yarn = yarn;
  return rope;
}

// rope_parameters nested as {main, compress}; or flat (rope_parameters or the
// legacy rope_scaling), where the flat fields are the compress rope's scaling
// and main is plain rope at rope_theta: transformers' __post_init__ rule.
Status parse_ropes(ConfigReader& reader, const ModelConfig& config, float partial_rotary_factor,
                   DeepseekV4Config& ds) {
  SLUICE_TRY_ASSIGN(theta, reader.positive_float_or("rope_theta", 10000.0f));
  SLUICE_TRY_ASSIGN(compress_theta, reader.positive_float_or("compress_rope_theta", 160000.0f));
  const json* parameters = reader.find("rope_parameters");
  const json* scaling = reader.find("rope_scaling");
  const char* key = parameters ? "rope_parameters" : "rope_scaling";
  const json* rope = parameters ? parameters : scaling;
  if (rope && !rope->is_object()) return reader.error(key, "must be an object");
  const std::string where = reader.origin() + ": " + key;
  const std::int32_t max_pos = config.max_position_embeddings;
  if (rope && rope->contains("main") && rope->contains("compress")) {
    SLUICE_TRY_ASSIGN(main, parse_rope_entry((*rope)["main"], where + ".main", partial_rotary_factor, max_pos, false));
    SLUICE_TRY_ASSIGN(compress, parse_rope_entry((*rope)["compress"], where + ".compress", partial_rotary_factor,
                                                 max_pos, false));
    ds.main_rope = main;
    ds.compress_rope = compress;
    return Ok{};
  }
  json compress = rope ? *rope : json::object();
  compress.erase("main");
  compress.erase("compress");
  compress["rope_theta"] = compress_theta;
  compress.erase("partial_rotary_factor");
  ds.main_rope = DeepseekV4Rope{.theta = theta};
  SLUICE_TRY_ASSIGN(compressed, parse_rope_entry(compress, where, partial_rotary_factor, max_pos, true));
  ds.compress_rope = compressed;
  return Ok{};
}

Status check_shapes(ConfigReader& reader, const ModelConfig& config, const DeepseekV4Config& ds) {
  const std::int64_t attn_width = std::int64_t{config.num_heads} * config.head_dim;
  if (ds.qk_rope_head_dim % 2 != 0 || ds.qk_rope_head_dim > config.head_dim)
    return reader.error("partial_rotary_factor", fmt::format("gives {} rope dims: must be even and at most head_dim {}",
                                                             ds.qk_rope_head_dim, config.head_dim));
  if (ds.qk_rope_head_dim > ds.index_head_dim)
    return reader.error("index_head_dim", fmt::format("= {} is smaller than the {} rope dims", ds.index_head_dim,
                                                      ds.qk_rope_head_dim));
  if (attn_width % ds.o_groups != 0)
    return reader.error("o_groups", fmt::format("= {} must divide num_attention_heads * head_dim = {}", ds.o_groups,
                                                attn_width));
  if (ds.num_experts_per_tok > ds.n_routed_experts)
    return reader.error("num_experts_per_tok", fmt::format("= {} exceeds n_routed_experts = {}",
                                                           ds.num_experts_per_tok, ds.n_routed_experts));
  return Ok{};
}

}  // namespace

Result<ModelConfig> parse_deepseek_v4_config(const json& root, const std::string& origin) {
  ModelConfig config;
  config.architecture = Architecture::deepseek_v4;
  ConfigReader reader(root, origin, informational_keys());
  DeepseekV4Config ds;
  SLUICE_TRY_ASSIGN(vocab, reader.positive_int("vocab_size"));
  SLUICE_TRY_ASSIGN(hidden, reader.positive_int("hidden_size"));
  SLUICE_TRY_ASSIGN(layers, reader.positive_int("num_hidden_layers"));
  SLUICE_TRY_ASSIGN(heads, reader.positive_int("num_attention_heads"));
  SLUICE_TRY_ASSIGN(kv_heads, reader.positive_int_or("num_key_value_heads", 1));
  if (kv_heads != 1)
    return reader.error("num_key_value_heads", "must be 1: DeepSeek-V4 attends one shared K=V latent per token");
  SLUICE_TRY_ASSIGN(head_dim, reader.positive_int_or("head_dim", 512));
  SLUICE_TRY_ASSIGN(max_pos, reader.positive_int_or("max_position_embeddings", 1048576));
  SLUICE_TRY_ASSIGN(eps, reader.positive_float_or("rms_norm_eps", 1e-6f));
  config.vocab_size = vocab;
  config.hidden_size = hidden;
  config.num_layers = layers;
  config.num_heads = heads;
  config.num_kv_heads = 1;
  config.head_dim = head_dim;
  config.max_position_embeddings = max_pos;
  config.rms_norm_eps = eps;

  // intermediate_size is transformers' alias of moe_intermediate_size (attribute_map).
  SLUICE_TRY_ASSIGN(moe_inter, reader.positive_int_or("moe_intermediate_size", 2048));
  SLUICE_TRY_ASSIGN(inter_alias, reader.positive_int_or("intermediate_size", moe_inter));
  if (inter_alias != moe_inter)
    return reader.error("intermediate_size", fmt::format("= {} disagrees with moe_intermediate_size = {} (its alias)",
                                                         inter_alias, moe_inter));
  ds.moe_intermediate_size = moe_inter;
  config.intermediate_size = moe_inter;
  SLUICE_TRY_ASSIGN(q_lora, reader.positive_int_or("q_lora_rank", ds.q_lora_rank));
  SLUICE_TRY_ASSIGN(o_groups, reader.positive_int_or("o_groups", ds.o_groups));
  SLUICE_TRY_ASSIGN(o_lora, reader.positive_int_or("o_lora_rank", ds.o_lora_rank));
  ds.q_lora_rank = q_lora;
  ds.o_groups = o_groups;
  ds.o_lora_rank = o_lora;

  // partial_rotary_factor, else the legacy qk_rope_head_dim / head_dim, else 64 / 512.
  float partial = 64.0f / 512.0f;
  const json* factor = reader.find("partial_rotary_factor");
  const json* legacy_rope_dim = reader.find("qk_rope_head_dim");
  if (factor) {
    if (!factor->is_number() || factor->get<double>() <= 0 || factor->get<double>() > 1)
      return reader.error("partial_rotary_factor", "must be in (0, 1]");
    partial = factor->get<float>();
  } else if (legacy_rope_dim) {
    if (!legacy_rope_dim->is_number_integer() || legacy_rope_dim->get<std::int64_t>() <= 0)
      return reader.error("qk_rope_head_dim", "must be a positive integer");
    partial = static_cast<float>(legacy_rope_dim->get<double>() / head_dim);
  }
  ds.qk_rope_head_dim = static_cast<std::int32_t>(static_cast<float>(head_dim) * partial);
  if (factor && legacy_rope_dim && legacy_rope_dim->get<std::int64_t>() != ds.qk_rope_head_dim)
    return reader.error("qk_rope_head_dim", fmt::format("= {} disagrees with head_dim * partial_rotary_factor = {}",
                                                        legacy_rope_dim->dump(), ds.qk_rope_head_dim));

  SLUICE_TRY(parse_compress_rates(reader, ds));
  SLUICE_TRY(parse_layer_types(reader, layers, ds));
  SLUICE_TRY(parse_mlp_layer_types(reader, layers, ds));
  SLUICE_TRY_ASSIGN(window, reader.positive_int_or("sliding_window", ds.sliding_window));
  SLUICE_TRY_ASSIGN(index_heads, reader.positive_int_or("index_n_heads", ds.index_n_heads));
  SLUICE_TRY_ASSIGN(index_dim, reader.positive_int_or("index_head_dim", ds.index_head_dim));
  SLUICE_TRY_ASSIGN(index_topk, reader.positive_int_or("index_topk", ds.index_topk));
  ds.sliding_window = window;
  ds.index_n_heads = index_heads;
  ds.index_head_dim = index_dim;
  ds.index_topk = index_topk;

  SLUICE_TRY_ASSIGN(hc_mult, reader.positive_int_or("hc_mult", ds.hc_mult));
  SLUICE_TRY_ASSIGN(sinkhorn, reader.positive_int_or("hc_sinkhorn_iters", ds.hc_sinkhorn_iters));
  SLUICE_TRY_ASSIGN(hc_eps, reader.positive_float_or("hc_eps", ds.hc_eps));
  ds.hc_mult = hc_mult;
  ds.hc_sinkhorn_iters = sinkhorn;
  ds.hc_eps = hc_eps;

  SLUICE_TRY_ASSIGN(experts, reader.positive_int_or("n_routed_experts", ds.n_routed_experts));
  SLUICE_TRY_ASSIGN(per_token, reader.positive_int_or("num_experts_per_tok", ds.num_experts_per_tok));
  SLUICE_TRY_ASSIGN(route_scale, reader.positive_float_or("routed_scaling_factor", ds.routed_scaling_factor));
  SLUICE_TRY_ASSIGN(limit, reader.positive_float_or("swiglu_limit", ds.swiglu_limit));
  SLUICE_TRY_ASSIGN(nextn, reader.count_or("num_nextn_predict_layers", ds.num_nextn_predict_layers));
  ds.n_routed_experts = experts;
  ds.num_experts_per_tok = per_token;
  ds.routed_scaling_factor = route_scale;
  ds.swiglu_limit = limit;
  ds.num_nextn_predict_layers = nextn;
  // transformers builds one shared MLP of moe_intermediate_size whatever n_shared_experts says.
  SLUICE_TRY(reader.require_value("n_shared_experts", 1, "transformers builds exactly one shared expert"));
  SLUICE_TRY(reader.require_value("scoring_func", "sqrtsoftplus", "only the sqrt(softplus) router is implemented"));
  // transformers divides the picked weights by their sum whatever this says.
  SLUICE_TRY(reader.require_value("norm_topk_prob", true, "transformers always normalizes the routed weights"));
  SLUICE_TRY(reader.require_value("hidden_act", "silu", "only SiLU-gated experts are implemented"));
  SLUICE_TRY(reader.require_value("attention_bias", false, "attention bias is not implemented"));
  SLUICE_TRY(reader.require_value("mlp_bias", false, "MLP bias is not implemented"));
  SLUICE_TRY(reader.require_value("tie_word_embeddings", false, "a tied head is not implemented for deepseek_v4"));
  if (const json* expert_dtype = reader.find("expert_dtype")) {
    if (*expert_dtype != "fp4" && *expert_dtype != "fp8" && *expert_dtype != "bf16")
      return reader.error("expert_dtype", fmt::format("= {} is not one of fp4, fp8, bf16", expert_dtype->dump()));
    ds.fp4_experts = *expert_dtype == "fp4";
  }
  if (const json* quantization = reader.find("quantization_config")) {
    // DeepSeek-V4 names its power-of-two scales; the block scales are read as they are stored.
    json fp8 = *quantization;
    if (fp8.is_object() && fp8.contains("scale_fmt")) {
      if (fp8["scale_fmt"] != "ue8m0")
        return reader.error("quantization_config", fmt::format(".scale_fmt = {} is not supported (ue8m0)",
                                                               fp8["scale_fmt"].dump()));
      fp8.erase("scale_fmt");
    }
    SLUICE_TRY_ASSIGN(block, parse_fp8_quantization(fp8, origin));
    config.fp8 = block;
  }
  SLUICE_TRY(parse_ropes(reader, config, partial, ds));
  config.rope_theta = ds.main_rope.theta;

  SLUICE_TRY_ASSIGN(bos, reader.token_ids("bos_token_id"));
  if (!bos.empty()) config.bos_token_id = bos.front();
  SLUICE_TRY_ASSIGN(eos, reader.token_ids("eos_token_id"));
  config.eos_token_ids = eos;
  SLUICE_TRY(check_shapes(reader, config, ds));
  SLUICE_TRY(reader.reject_unknown_keys());
  config.deepseek_v4 = std::make_shared<const DeepseekV4Config>(std::move(ds));
  return config;
}

}  // namespace sluice
