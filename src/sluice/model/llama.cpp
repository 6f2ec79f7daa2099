#include "sluice/model/llama.h"

#include <cmath>

#include <fmt/format.h>

namespace sluice {

Result<std::unique_ptr<LlamaModel>> LlamaModel::load(const ModelConfig& config, const Checkpoint& checkpoint,
                                                     Ops& ops, const LoadProgress& progress) {
  auto owned = std::make_unique<LlamaModel>();
  LlamaModel& model = *owned;
  model.config_ = config;
  model.rope_ = RopeParams{.head_dim = config.head_dim, .theta = config.rope_theta};
  if (config.rope_llama3) {
    model.rope_.llama3_factor = config.rope_llama3->factor;
    model.rope_.llama3_low_freq_factor = config.rope_llama3->low_freq_factor;
    model.rope_.llama3_high_freq_factor = config.rope_llama3->high_freq_factor;
    model.rope_.llama3_original_max_position = config.rope_llama3->original_max_position_embeddings;
  }
  const std::int64_t hidden = config.hidden_size, vocab = config.vocab_size;
  const std::int64_t inter = config.intermediate_size;
  HostWeightBuffers no_fp8_buffers;
  WeightBinder bind(checkpoint, ops, progress, std::nullopt, no_fp8_buffers);
  SLUICE_TRY_ASSIGN(embed, bind.weight("model.embed_tokens.weight", {vocab, hidden}));
  model.embed_tokens_ = embed;
  for (std::int32_t i = 0; i < config.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    Layer layer;
    SLUICE_TRY_ASSIGN(input_norm, bind.weight(p + "input_layernorm.weight", {hidden}));
    SLUICE_TRY_ASSIGN(qkv, bind.concatenated({{p + "self_attn.q_proj.weight", {config.q_size(), hidden}},
                                              {p + "self_attn.k_proj.weight", {config.kv_size(), hidden}},
                                              {p + "self_attn.v_proj.weight", {config.kv_size(), hidden}}}));
    SLUICE_TRY_ASSIGN(o, bind.weight(p + "self_attn.o_proj.weight", {hidden, config.q_size()}));
    layer.input_norm = input_norm;
    layer.qkv_proj = qkv;
    layer.o_proj = o;
    if (config.attention_bias) {
      SLUICE_TRY_ASSIGN(qb, bind.weight(p + "self_attn.q_proj.bias", {config.q_size()}));
      SLUICE_TRY_ASSIGN(kb, bind.weight(p + "self_attn.k_proj.bias", {config.kv_size()}));
      SLUICE_TRY_ASSIGN(vb, bind.weight(p + "self_attn.v_proj.bias", {config.kv_size()}));
      layer.qkv_bias = {qb, kb, vb};
    }
    if (config.qk_norm) {
      SLUICE_TRY_ASSIGN(qn, bind.weight(p + "self_attn.q_norm.weight", {config.head_dim}));
      SLUICE_TRY_ASSIGN(kn, bind.weight(p + "self_attn.k_norm.weight", {config.head_dim}));
      layer.q_norm = qn;
      layer.k_norm = kn;
    }
    SLUICE_TRY_ASSIGN(post_norm, bind.weight(p + "post_attention_layernorm.weight", {hidden}));
    SLUICE_TRY_ASSIGN(gate_up, bind.concatenated({{p + "mlp.gate_proj.weight", {inter, hidden}},
                                                  {p + "mlp.up_proj.weight", {inter, hidden}}}));
    SLUICE_TRY_ASSIGN(down, bind.weight(p + "mlp.down_proj.weight", {hidden, inter}));
    layer.post_attention_norm = post_norm;
    layer.gate_up_proj = gate_up;
    layer.down_proj = down;
    model.layers_.push_back(layer);
  }
  SLUICE_TRY_ASSIGN(final_norm, bind.weight("model.norm.weight", {hidden}));
  model.final_norm_ = final_norm;
  if (config.tie_word_embeddings) {
    model.lm_head_ = model.embed_tokens_;
  } else {
    SLUICE_TRY_ASSIGN(lm_head, bind.weight("lm_head.weight", {vocab, hidden}));
    model.lm_head_ = lm_head;
  }
  SLUICE_TRY(bind.reject_unused());
  return owned;
}

KvCacheSpec LlamaModel::kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const {
  return KvCacheSpec{.num_layers = config_.num_layers,
                     .num_blocks = num_blocks,
                     .block_size_tokens = block_size_tokens,
                     .num_kv_heads = config_.num_kv_heads,
                     .head_dim = config_.head_dim};
}

Result<Tensor> LlamaModel::forward(Ops& ops, const StepLayout& layout) const {
  const std::int64_t n = layout.num_rows();
  const std::int64_t hidden = config_.hidden_size;
  const float eps = config_.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));

  Tensor residual = ops.scratch({n, hidden});  // the residual stream
  Tensor normed = ops.scratch({n, hidden});
  Tensor q = ops.scratch({n, config_.q_size()});
  Tensor k = ops.scratch({n, config_.kv_size()});
  Tensor v = ops.scratch({n, config_.kv_size()});
  Tensor attn = ops.scratch({n, config_.q_size()});
  Tensor block_out = ops.scratch({n, hidden});  // attention or MLP output before the residual add
  Tensor gate_up = ops.scratch({n, 2LL * config_.intermediate_size});  // workspace of gate_up_silu
  Tensor act = ops.scratch({n, std::int64_t{config_.intermediate_size}});

  ops.embedding(embed_tokens_, residual);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    if (l == 0)
      ops.rms_norm(residual, layer.input_norm, eps, normed);
    else
      ops.add_rms_norm(residual, block_out, layer.input_norm, eps, normed);
    ops.qkv_projection(normed, layer.qkv_proj, layer.qkv_bias, q, k, v);
    if (config_.qk_norm) {
      const Tensor q_heads = q.reshaped({n * config_.num_heads, config_.head_dim});
      const Tensor k_heads = k.reshaped({n * config_.num_kv_heads, config_.head_dim});
      ops.rms_norm(q_heads, layer.q_norm, eps, q_heads);
      ops.rms_norm(k_heads, layer.k_norm, eps, k_heads);
    }
    ops.rope(q, k, rope_);
    ops.attention(static_cast<std::int32_t>(l), q, k, v, scale, attn);
    ops.matmul(attn, layer.o_proj, Tensor{}, block_out);
    ops.add_rms_norm(residual, block_out, layer.post_attention_norm, eps, normed);
    ops.gate_up_silu(normed, layer.gate_up_proj, gate_up, act);
    ops.matmul(act, layer.down_proj, Tensor{}, block_out);
  }
  return final_logits(ops, layout, {.residual = residual, .block_out = block_out, .final_norm = final_norm_,
                                    .eps = eps, .lm_head = lm_head_, .normed = normed});
}

}  // namespace sluice
