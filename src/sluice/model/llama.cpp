#include "sluice/model/llama.h"

#include <cmath>

#include <fmt/format.h>

#include "sluice/model/tensor_parallel.h"

namespace sluice {

Result<std::unique_ptr<LlamaModel>> LlamaModel::load(const ModelConfig& config, const Checkpoint& checkpoint,
                                                     Ops& ops, const LoadProgress& progress, Communicator* comm) {
  const WeightShard shard{.rank = comm ? comm->rank() : 0, .size = comm ? comm->size() : 1};
  SLUICE_TRY(check_tensor_parallel(config, shard.size));
  auto owned = std::make_unique<LlamaModel>();
  LlamaModel& model = *owned;
  model.config_ = config;
  model.comm_ = shard.size > 1 ? comm : nullptr;
  model.num_heads_ = config.num_heads / shard.size;
  model.num_kv_heads_ = config.num_kv_heads / shard.size;
  model.intermediate_size_ = config.intermediate_size / shard.size;
  model.first_token_id_ = config.vocab_size / shard.size * shard.rank;
  model.rope_ = RopeParams{.head_dim = config.head_dim, .theta = config.rope_theta};
  if (config.rope_llama3) {
    model.rope_.llama3_factor = config.rope_llama3->factor;
    model.rope_.llama3_low_freq_factor = config.rope_llama3->low_freq_factor;
    model.rope_.llama3_high_freq_factor = config.rope_llama3->high_freq_factor;
    model.rope_.llama3_original_max_position = config.rope_llama3->original_max_position_embeddings;
  }
  const std::int64_t hidden = config.hidden_size, vocab = config.vocab_size;
  const std::int64_t inter = config.intermediate_size;
  WeightBinder bind(checkpoint, ops, progress, std::nullopt, model.host_buffers_);
  SLUICE_TRY_ASSIGN(embed, bind.row_shards({{"model.embed_tokens.weight", {vocab, hidden}}}, shard));
  model.embed_tokens_ = embed;
  for (std::int32_t i = 0; i < config.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    Layer layer;
    SLUICE_TRY_ASSIGN(input_norm, bind.weight(p + "input_layernorm.weight", {hidden}));
    // Column-parallel: each rank's heads are contiguous rows of q, k and v.
    SLUICE_TRY_ASSIGN(qkv, bind.row_shards({{p + "self_attn.q_proj.weight", {config.q_size(), hidden}},
                                            {p + "self_attn.k_proj.weight", {config.kv_size(), hidden}},
                                            {p + "self_attn.v_proj.weight", {config.kv_size(), hidden}}},
                                           shard));
    SLUICE_TRY_ASSIGN(o, bind.column_shard(p + "self_attn.o_proj.weight", {hidden, config.q_size()}, shard));
    layer.input_norm = input_norm;
    layer.qkv_proj = qkv;
    layer.o_proj = o;
    if (config.attention_bias) {
      SLUICE_TRY_ASSIGN(qb, bind.row_shards({{p + "self_attn.q_proj.bias", {config.q_size()}}}, shard));
      SLUICE_TRY_ASSIGN(kb, bind.row_shards({{p + "self_attn.k_proj.bias", {config.kv_size()}}}, shard));
      SLUICE_TRY_ASSIGN(vb, bind.row_shards({{p + "self_attn.v_proj.bias", {config.kv_size()}}}, shard));
      layer.qkv_bias = {qb, kb, vb};
    }
    if (config.qk_norm) {
      SLUICE_TRY_ASSIGN(qn, bind.weight(p + "self_attn.q_norm.weight", {config.head_dim}));
      SLUICE_TRY_ASSIGN(kn, bind.weight(p + "self_attn.k_norm.weight", {config.head_dim}));
      layer.q_norm = qn;
      layer.k_norm = kn;
    }
    SLUICE_TRY_ASSIGN(post_norm, bind.weight(p + "post_attention_layernorm.weight", {hidden}));
    SLUICE_TRY_ASSIGN(gate_up, bind.row_shards({{p + "mlp.gate_proj.weight", {inter, hidden}},
                                                {p + "mlp.up_proj.weight", {inter, hidden}}},
                                               shard));
    SLUICE_TRY_ASSIGN(down, bind.column_shard(p + "mlp.down_proj.weight", {hidden, inter}, shard));
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
    SLUICE_TRY_ASSIGN(lm_head, bind.row_shards({{"lm_head.weight", {vocab, hidden}}}, shard));
    model.lm_head_ = lm_head;
  }
  SLUICE_TRY(bind.reject_unused());
  return owned;
}

KvCacheSpec LlamaModel::kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const {
  return KvCacheSpec{.num_layers = config_.num_layers,
                     .num_blocks = num_blocks,
                     .block_size_tokens = block_size_tokens,
                     .num_kv_heads = num_kv_heads_,
                     .head_dim = config_.head_dim};
}

Result<Tensor> LlamaModel::forward(Ops& ops, const StepLayout& layout) const {
  const std::int64_t n = layout.num_rows();
  const std::int64_t hidden = config_.hidden_size;
  const std::int64_t q_size = std::int64_t{num_heads_} * config_.head_dim;
  const std::int64_t kv_size = std::int64_t{num_kv_heads_} * config_.head_dim;
  const float eps = config_.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));

  Tensor residual = ops.scratch({n, hidden});  // the residual stream
  Tensor normed = ops.scratch({n, hidden});
  Tensor q = ops.scratch({n, q_size});
  Tensor k = ops.scratch({n, kv_size});
  Tensor v = ops.scratch({n, kv_size});
  Tensor attn = ops.scratch({n, q_size});
  Tensor block_out = ops.scratch({n, hidden});  // attention or MLP output before the residual add
  Tensor gate_up = ops.scratch({n, 2 * intermediate_size_});  // workspace of gate_up_silu
  Tensor act = ops.scratch({n, intermediate_size_});

  SLUICE_TRY(embed_tokens(ops, comm_, embed_tokens_, first_token_id_, residual));
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    if (l == 0)
      ops.rms_norm(residual, layer.input_norm, eps, normed);
    else
      ops.add_rms_norm(residual, block_out, layer.input_norm, eps, normed);
    ops.qkv_projection(normed, layer.qkv_proj, layer.qkv_bias, q, k, v);
    if (config_.qk_norm) {
      const Tensor q_heads = q.reshaped({n * num_heads_, config_.head_dim});
      const Tensor k_heads = k.reshaped({n * num_kv_heads_, config_.head_dim});
      ops.rms_norm(q_heads, layer.q_norm, eps, q_heads);
      ops.rms_norm(k_heads, layer.k_norm, eps, k_heads);
    }
    ops.rope(q, k, rope_);
    ops.attention(static_cast<std::int32_t>(l), q, k, v, scale, attn);
    ops.matmul(attn, layer.o_proj, Tensor{}, block_out);
    SLUICE_TRY(all_reduce(comm_, block_out));
    ops.add_rms_norm(residual, block_out, layer.post_attention_norm, eps, normed);
    ops.gate_up_silu(normed, layer.gate_up_proj, gate_up, act);
    ops.matmul(act, layer.down_proj, Tensor{}, block_out);
    SLUICE_TRY(all_reduce(comm_, block_out));
  }
  const Tensor logits = final_logits(ops, layout, {.residual = residual, .block_out = block_out,
                                                   .final_norm = final_norm_, .eps = eps, .lm_head = lm_head_,
                                                   .normed = normed});
  return gather_logits(ops, comm_, logits, config_.vocab_size);
}

}  // namespace sluice
