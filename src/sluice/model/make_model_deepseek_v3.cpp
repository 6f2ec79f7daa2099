// make-model --arch deepseek_v3: the Hugging Face DeepSeek-V3 layout (the names
// transformers' DeepseekV3ForCausalLM loads, experts one module each), with
// the checkpoint's own config.json fields.
#include <cmath>

#include <fmt/format.h>

#include "sluice/model/make_model_parts.h"

namespace sluice {
namespace {

void add_mlp(std::vector<PendingTensor>& out, const std::string& prefix, std::int64_t hidden, std::int64_t inter) {
  out.push_back({prefix + "gate_proj.weight", {inter, hidden}, linear_init(hidden), true});
  out.push_back({prefix + "up_proj.weight", {inter, hidden}, linear_init(hidden), true});
  out.push_back({prefix + "down_proj.weight", {hidden, inter}, linear_init(inter), true});
}

void add_decoder_layer(std::vector<PendingTensor>& out, const MakeModelOptions& o, std::int32_t layer) {
  const DeepseekV3Shape& d = o.deepseek_v3;
  const std::int64_t h = o.hidden_size, heads = o.num_heads;
  const std::int64_t qk_head = d.qk_nope_head_dim + d.qk_rope_head_dim;
  const std::string p = fmt::format("model.layers.{}.", layer);
  out.push_back({p + "input_layernorm.weight", {h}, kNormInit});
  if (d.q_lora_rank > 0) {
    out.push_back({p + "self_attn.q_a_proj.weight", {d.q_lora_rank, h}, linear_init(h), true});
    out.push_back({p + "self_attn.q_a_layernorm.weight", {d.q_lora_rank}, kNormInit});
    out.push_back({p + "self_attn.q_b_proj.weight", {heads * qk_head, d.q_lora_rank}, linear_init(d.q_lora_rank),
                   true});
  } else {
    out.push_back({p + "self_attn.q_proj.weight", {heads * qk_head, h}, linear_init(h), true});
  }
  out.push_back({p + "self_attn.kv_a_proj_with_mqa.weight", {d.kv_lora_rank + d.qk_rope_head_dim, h},
                 linear_init(h), true});
  out.push_back({p + "self_attn.kv_a_layernorm.weight", {d.kv_lora_rank}, kNormInit});
  out.push_back({p + "self_attn.kv_b_proj.weight", {heads * (d.qk_nope_head_dim + d.v_head_dim), d.kv_lora_rank},
                 linear_init(d.kv_lora_rank), true});
  out.push_back({p + "self_attn.o_proj.weight", {h, heads * d.v_head_dim}, linear_init(heads * d.v_head_dim), true});
  out.push_back({p + "post_attention_layernorm.weight", {h}, kNormInit});
  if (layer < d.first_k_dense_replace) {
    add_mlp(out, p + "mlp.", h, o.intermediate_size);
    return;
  }
  out.push_back({p + "mlp.gate.weight", {d.n_routed_experts, h}, linear_init(h)});
  // Positive, so every expert's choice score (sigmoid + bias) stays above the
  // 0 that group masking writes: the choice never depends on tie order.
  out.push_back({p + "mlp.gate.e_score_correction_bias", {d.n_routed_experts}, Init{0.02f, 0.01f}, false, true});
  for (std::int32_t e = 0; e < d.n_routed_experts; ++e)
    add_mlp(out, fmt::format("{}mlp.experts.{}.", p, e), h, d.moe_intermediate_size);
  add_mlp(out, p + "mlp.shared_experts.", h, std::int64_t{d.moe_intermediate_size} * d.n_shared_experts);
}

}  // namespace

Status check_deepseek_v3_options(const MakeModelOptions& o) {
  const DeepseekV3Shape& d = o.deepseek_v3;
  for (auto [value, name] : {std::pair{d.kv_lora_rank, "--kv-lora-rank"}, {d.qk_nope_head_dim, "--qk-nope-head-dim"},
                             {d.qk_rope_head_dim, "--qk-rope-head-dim"}, {d.v_head_dim, "--v-head-dim"},
                             {d.n_routed_experts, "--experts"}, {d.num_experts_per_tok, "--experts-per-token"},
                             {d.n_shared_experts, "--shared-experts"}, {d.moe_intermediate_size, "--moe-intermediate"},
                             {d.n_group, "--expert-groups"}, {d.topk_group, "--topk-groups"}})
    if (value <= 0) return Error{fmt::format("{} must be positive", name)};
  if (d.q_lora_rank < 0) return Error{"--q-lora-rank must be 0 (none) or positive"};
  if (d.first_k_dense_replace < 0 || d.mtp_layers < 0) return Error{"--dense-layers and --mtp-layers must be >= 0"};
  if (d.qk_rope_head_dim % 2 != 0) return Error{"--qk-rope-head-dim must be even"};
  if (d.n_routed_experts % d.n_group != 0 || d.n_routed_experts / d.n_group < 2)
    return Error{fmt::format("--expert-groups {} must divide --experts {} into groups of at least 2", d.n_group,
                             d.n_routed_experts)};
  if (d.topk_group > d.n_group) return Error{"--topk-groups must not exceed --expert-groups"};
  if (d.num_experts_per_tok > d.topk_group * (d.n_routed_experts / d.n_group))
    return Error{"--experts-per-token exceeds the experts of the selected groups"};
  if (d.yarn_factor < 0 || (d.yarn_factor > 0 && d.yarn_factor < 1)) return Error{"--yarn-factor must be 0 or >= 1"};
  if (d.yarn_factor > 0) {
    const double original = o.max_position_embeddings / static_cast<double>(d.yarn_factor);
    if (original != std::floor(original))
      return Error{fmt::format("--yarn-factor {} must divide --max-position {}", d.yarn_factor,
                               o.max_position_embeddings)};
  }
  return Ok{};
}

std::vector<PendingTensor> deepseek_v3_tensors(const MakeModelOptions& o) {
  const std::int64_t h = o.hidden_size, v = o.vocab_size;
  std::vector<PendingTensor> out;
  out.push_back({"model.embed_tokens.weight", {v, h}, Init{0.0f, 1.0f}});
  for (std::int32_t i = 0; i < o.num_layers; ++i) add_decoder_layer(out, o, i);
  out.push_back({"model.norm.weight", {h}, kNormInit});
  out.push_back({"lm_head.weight", {v, h}, linear_init(h)});
  // The multi-token-prediction layers follow the decoder, as in DeepSeek's
  // checkpoints: their own embedding, two norms, the projection of
  // [norm(embedding), norm(hidden)], a decoder layer and a head.
  for (std::int32_t j = 0; j < o.deepseek_v3.mtp_layers; ++j) {
    const std::int32_t layer = o.num_layers + j;
    const std::string p = fmt::format("model.layers.{}.", layer);
    out.push_back({p + "embed_tokens.weight", {v, h}, Init{0.0f, 1.0f}});
    out.push_back({p + "enorm.weight", {h}, kNormInit});
    out.push_back({p + "hnorm.weight", {h}, kNormInit});
    out.push_back({p + "eh_proj.weight", {h, 2 * h}, linear_init(2 * h), true});
    add_decoder_layer(out, o, layer);
    out.push_back({p + "shared_head.norm.weight", {h}, kNormInit});
    out.push_back({p + "shared_head.head.weight", {v, h}, linear_init(h)});
  }
  return out;
}

nlohmann::ordered_json deepseek_v3_config_json(const MakeModelOptions& o, const BuiltTokenizer& tok) {
  const DeepseekV3Shape& d = o.deepseek_v3;
  nlohmann::ordered_json c = {
      {"architectures", {"DeepseekV3ForCausalLM"}},
      {"model_type", "deepseek_v3"},
      {"vocab_size", o.vocab_size},
      {"hidden_size", o.hidden_size},
      {"intermediate_size", o.intermediate_size},
      {"moe_intermediate_size", d.moe_intermediate_size},
      {"num_hidden_layers", o.num_layers},
      {"num_nextn_predict_layers", d.mtp_layers},
      {"num_attention_heads", o.num_heads},
      {"num_key_value_heads", o.num_heads},
      {"n_shared_experts", d.n_shared_experts},
      {"n_routed_experts", d.n_routed_experts},
      {"routed_scaling_factor", d.routed_scaling_factor},
      {"kv_lora_rank", d.kv_lora_rank},
      {"q_lora_rank", d.q_lora_rank > 0 ? nlohmann::ordered_json(d.q_lora_rank) : nlohmann::ordered_json(nullptr)},
      {"qk_rope_head_dim", d.qk_rope_head_dim},
      {"v_head_dim", d.v_head_dim},
      {"qk_nope_head_dim", d.qk_nope_head_dim},
      {"topk_method", "noaux_tc"},
      {"n_group", d.n_group},
      {"topk_group", d.topk_group},
      {"num_experts_per_tok", d.num_experts_per_tok},
      {"moe_layer_freq", 1},
      {"first_k_dense_replace", d.first_k_dense_replace},
      {"norm_topk_prob", true},
      {"scoring_func", "sigmoid"},
      {"hidden_act", "silu"},
      {"max_position_embeddings", o.max_position_embeddings},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 10000.0},
      {"attention_bias", false},
      {"tie_word_embeddings", false},
      {"bos_token_id", tok.bos_token_id},
      {"eos_token_id", {tok.eos_token_id, tok.end_of_turn_token_id}},
      {"torch_dtype", o.dtype == DType::f32 ? "float32" : "bfloat16"}};
  if (d.yarn_factor > 0)
    c["rope_scaling"] = {{"type", "yarn"},
                         {"factor", d.yarn_factor},
                         {"original_max_position_embeddings",
                          static_cast<std::int32_t>(o.max_position_embeddings / d.yarn_factor)},
                         {"beta_fast", 32},
                         {"beta_slow", 1},
                         {"mscale", d.yarn_mscale},
                         {"mscale_all_dim", d.yarn_mscale_all_dim}};
  if (o.dtype == DType::f8_e4m3)
    c["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"weight_block_size", {128, 128}}};
  return c;
}

}  // namespace sluice
