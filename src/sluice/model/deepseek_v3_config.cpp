#include "sluice/model/deepseek_v3_config.h"

#include <cmath>

#include <fmt/format.h>

namespace sluice {
using nlohmann::json;

Result<Fp8BlockQuantization> parse_fp8_quantization(const json& value, const std::string& origin) {
  const std::string where = origin + ": quantization_config";
  if (!value.is_object()) return Error{where + " must be an object"};
  static const std::set<std::string, std::less<>> kNone;
  ConfigReader reader(value, where, kNone);
  SLUICE_TRY(reader.require_value("quant_method", "fp8", "only fp8 block quantization is implemented"));
  if (!reader.find("quant_method")) return reader.error("quant_method", "is missing");
  SLUICE_TRY(reader.require_value("fmt", "e4m3", "only float8 e4m3 weights are implemented"));
  SLUICE_TRY(reader.require_value("activation_scheme", "dynamic",
                                  "only dynamic activation scaling is implemented (weights carry their scales)"));
  // Which modules stay unquantized is read off each tensor's dtype.
  reader.find("modules_to_not_convert");
  Fp8BlockQuantization fp8;
  const json* block = reader.find("weight_block_size");
  if (!block) return reader.error("weight_block_size", "is missing (per-tensor fp8 scales are not implemented)");
  if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
      !(*block)[1].is_number_integer() || (*block)[0].get<std::int64_t>() <= 0 ||
      (*block)[1].get<std::int64_t>() <= 0 || (*block)[0].get<std::int64_t>() > (1 << 20) ||
      (*block)[1].get<std::int64_t>() > (1 << 20))
    return reader.error("weight_block_size", "must be [rows, cols] of positive integers");
  fp8.block_rows = (*block)[0].get<std::int32_t>();
  fp8.block_cols = (*block)[1].get<std::int32_t>();
  SLUICE_TRY(reader.reject_unknown_keys());
  return fp8;
}

const std::set<std::string, std::less<>>& deepseek_v3_informational_keys() {
  static const std::set<std::string, std::less<>> keys = {
      "architectures", "torch_dtype", "dtype", "transformers_version", "initializer_range", "use_cache",
      "pad_token_id", "_name_or_path", "model_type", "attention_dropout", "bos_token_id", "eos_token_id",
      "output_attentions", "output_hidden_states", "return_dict", "is_encoder_decoder", "tokenizer_class",
      // Training only: the load-balancing loss and the expert-parallel degree of the reference code.
      "aux_loss_alpha", "seq_aux", "ep_size",
      // Points at the checkpoint's own modeling code, which sluice does not run.
      "auto_map",
  };
  return keys;
}

Status parse_deepseek_v3_fields(ConfigReader& reader, ModelConfig& config) {
  DeepseekV3Config ds;
  if (reader.find("q_lora_rank")) {
    SLUICE_TRY_ASSIGN(rank, reader.positive_int("q_lora_rank"));
    ds.q_lora_rank = rank;
  }
  SLUICE_TRY_ASSIGN(kv_lora, reader.positive_int("kv_lora_rank"));
  SLUICE_TRY_ASSIGN(nope, reader.positive_int("qk_nope_head_dim"));
  SLUICE_TRY_ASSIGN(rope, reader.positive_int("qk_rope_head_dim"));
  SLUICE_TRY_ASSIGN(v_dim, reader.positive_int("v_head_dim"));
  SLUICE_TRY_ASSIGN(interleave, reader.boolean_or("rope_interleave", true));
  ds.kv_lora_rank = kv_lora;
  ds.qk_nope_head_dim = nope;
  ds.qk_rope_head_dim = rope;
  ds.v_head_dim = v_dim;
  ds.rope_interleave = interleave;
  if (rope % 2 != 0) return reader.error("qk_rope_head_dim", "must be even for rotary embeddings");
  // transformers sets these two from the others and writes them when it saves a config.
  SLUICE_TRY_ASSIGN(head_dim, reader.positive_int_or("head_dim", rope));
  if (head_dim != rope)
    return reader.error("head_dim", fmt::format("= {} must equal qk_rope_head_dim = {}", head_dim, rope));
  SLUICE_TRY_ASSIGN(qk_head_dim, reader.positive_int_or("qk_head_dim", ds.qk_head_dim()));
  if (qk_head_dim != ds.qk_head_dim())
    return reader.error("qk_head_dim", fmt::format("= {} must equal qk_nope_head_dim + qk_rope_head_dim = {}",
                                                   qk_head_dim, ds.qk_head_dim()));
  config.head_dim = rope;

  SLUICE_TRY_ASSIGN(experts, reader.positive_int("n_routed_experts"));
  SLUICE_TRY_ASSIGN(per_token, reader.positive_int("num_experts_per_tok"));
  SLUICE_TRY_ASSIGN(shared, reader.positive_int_or("n_shared_experts", 1));
  SLUICE_TRY_ASSIGN(moe_inter, reader.positive_int("moe_intermediate_size"));
  SLUICE_TRY_ASSIGN(first_dense, reader.count_or("first_k_dense_replace", 0));
  SLUICE_TRY_ASSIGN(groups, reader.positive_int_or("n_group", 1));
  SLUICE_TRY_ASSIGN(top_groups, reader.positive_int_or("topk_group", 1));
  SLUICE_TRY_ASSIGN(norm_topk, reader.boolean_or("norm_topk_prob", true));
  SLUICE_TRY_ASSIGN(route_scale, reader.positive_float_or("routed_scaling_factor", 1.0f));
  SLUICE_TRY_ASSIGN(nextn, reader.count_or("num_nextn_predict_layers", 0));
  ds.n_routed_experts = experts;
  ds.num_experts_per_tok = per_token;
  ds.n_shared_experts = shared;
  ds.moe_intermediate_size = moe_inter;
  ds.first_k_dense_replace = first_dense;
  ds.n_group = groups;
  ds.topk_group = top_groups;
  ds.norm_topk_prob = norm_topk;
  ds.routed_scaling_factor = route_scale;
  ds.num_nextn_predict_layers = nextn;
  if (experts % groups != 0)
    return reader.error("n_group", fmt::format("= {} must divide n_routed_experts = {}", groups, experts));
  if (experts / groups < 2)
    return reader.error("n_group", "must leave at least 2 experts per group (groups are scored by their top 2)");
  if (top_groups > groups)
    return reader.error("topk_group", fmt::format("= {} exceeds n_group = {}", top_groups, groups));
  // Past this the choice falls among the masked-out experts, which the
  // reference breaks by an unspecified tie order.
  if (per_token > top_groups * (experts / groups))
    return reader.error("num_experts_per_tok",
                        fmt::format("= {} exceeds the {} experts of the topk_group = {} selected groups", per_token,
                                    top_groups * (experts / groups), top_groups));
  // transformers puts a MoE on every layer from first_k_dense_replace on; the
  // reference code also skips layers by moe_layer_freq, which V3 sets to 1.
  SLUICE_TRY(reader.require_value("moe_layer_freq", 1, "MoE on every other layer is not implemented"));
  SLUICE_TRY(reader.require_value("scoring_func", "sigmoid", "only the sigmoid router is implemented"));
  SLUICE_TRY(reader.require_value("topk_method", "noaux_tc",
                                  "only group-limited routing with the correction bias (noaux_tc) is implemented"));
  if (const json* quantization = reader.find("quantization_config")) {
    SLUICE_TRY_ASSIGN(fp8, parse_fp8_quantization(*quantization, reader.origin()));
    config.fp8 = fp8;
  }
  config.deepseek_v3 = ds;
  return Ok{};
}

Result<YarnRopeScaling> parse_yarn_rope_scaling(const json& rope, const std::string& where,
                                                std::int32_t max_position_embeddings) {
  static const std::set<std::string, std::less<>> kSpelling = {"rope_type", "type", "rope_theta"};
  ConfigReader reader(rope, where, kSpelling);
  YarnRopeScaling yarn;
  SLUICE_TRY_ASSIGN(factor, reader.positive_float_or("factor", 0.0f));
  if (factor <= 0.0f) return reader.error("factor", "is missing");
  SLUICE_TRY_ASSIGN(original, reader.positive_int_or("original_max_position_embeddings", max_position_embeddings));
  SLUICE_TRY_ASSIGN(beta_fast, reader.positive_float_or("beta_fast", 32.0f));
  SLUICE_TRY_ASSIGN(beta_slow, reader.positive_float_or("beta_slow", 1.0f));
  SLUICE_TRY_ASSIGN(mscale, reader.positive_float_or("mscale", 0.0f));
  SLUICE_TRY_ASSIGN(mscale_all_dim, reader.positive_float_or("mscale_all_dim", 0.0f));
  SLUICE_TRY_ASSIGN(truncate, reader.boolean_or("truncate", true));
  if (const json* attention_factor = reader.find("attention_factor")) {
    if (!attention_factor->is_number() || attention_factor->get<double>() <= 0)
      return reader.error("attention_factor", "must be a positive number");
    yarn.attention_factor = attention_factor->get<float>();
  }
  yarn.factor = factor;
  yarn.original_max_position_embeddings = original;
  yarn.beta_fast = beta_fast;
  yarn.beta_slow = beta_slow;
  yarn.mscale = mscale;
  yarn.mscale_all_dim = mscale_all_dim;
  yarn.truncate = truncate;
  // transformers interpolates by max_position_embeddings / original where the
  // attention's softmax scale uses `factor`: they must be one number.
  if (rope.contains("original_max_position_embeddings")) {
    const double ratio = static_cast<double>(max_position_embeddings) / original;
    if (std::fabs(ratio - factor) > 1e-6 * factor)
      return reader.error("factor", fmt::format("= {} disagrees with max_position_embeddings / "
                                                "original_max_position_embeddings = {} / {} = {}",
                                                factor, max_position_embeddings, original, ratio));
  }
  SLUICE_TRY(reader.reject_unknown_keys());
  return yarn;
}

float yarn_attention_factor(const YarnRopeScaling& yarn) {
  auto mscale = [](double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  if (yarn.attention_factor) return *yarn.attention_factor;
  if (yarn.mscale > 0 && yarn.mscale_all_dim > 0)
    return static_cast<float>(mscale(yarn.factor, yarn.mscale) / mscale(yarn.factor, yarn.mscale_all_dim));
  return static_cast<float>(mscale(yarn.factor, 1.0));
}

}  // namespace sluice
