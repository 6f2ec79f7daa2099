#include "sluice/sim/model_profile.h"

#include <algorithm>

namespace sluice::sim {

std::int64_t ModelProfile::total_params() const {
  std::int64_t n = embedding_params + (head_tied_to_embedding ? 0 : head_params);
  for (const auto& group : layer_groups) n += group.total_params();
  return n;
}

std::int64_t ModelProfile::active_params_per_prompt_token() const {
  std::int64_t n = 0;
  for (const auto& group : layer_groups) {
    if (group.scope == TokenScope::kAllTokens) n += group.active_params_per_token();
  }
  return n;
}

std::int64_t ModelProfile::active_params_per_output_token() const {
  std::int64_t n = head_params;
  for (const auto& group : layer_groups) n += group.active_params_per_token();
  return n;
}

double ModelProfile::gpu_weight_bytes() const {
  double bytes = embedding_head_bytes + other_gpu_weight_bytes;
  for (const auto& group : layer_groups) {
    bytes += group.dense_weight_bytes +
             static_cast<double>(group.num_layers) * group.num_routed_experts * group.expert_weight_bytes;
  }
  return bytes;
}

bool ModelProfile::is_moe() const { return num_routed_experts() > 0; }

std::int32_t ModelProfile::num_routed_experts() const {
  std::int32_t n = 0;
  for (const auto& group : layer_groups) n = std::max(n, group.num_routed_experts);
  return n;
}

Result<ModelProfile> with_fp8_kv_cache(const ModelProfile& profile) {
  if (profile.kv_bytes_per_token_fp8 <= 0 || profile.kv_bytes_per_token <= 0) {
    return Error{"--kv-cache-dtype fp8: " + profile.name + " has no FP8 KV cache layout"};
  }
  ModelProfile p = profile;
  const double ratio = p.kv_bytes_per_token_fp8 / p.kv_bytes_per_token;
  p.kv_bytes_per_token = p.kv_bytes_per_token_fp8;
  for (auto& group : p.layer_groups) {
    group.attention.scan_bytes_per_context_token *= ratio;
    group.attention.gather_bytes_per_query *= ratio;
  }
  return p;
}

ModelProfile make_dense_profile(const DenseShape& shape) {
  ModelProfile p;
  p.name = shape.name;
  p.source = "dense Llama-family shape";
  p.num_layers = shape.num_layers;
  p.hidden_size = shape.hidden_size;
  p.num_attention_heads = shape.num_attention_heads;
  p.num_kv_heads = shape.num_kv_heads;
  p.head_dim = shape.head_dim;
  p.intermediate_size = shape.intermediate_size;
  p.vocab_size = shape.vocab_size;
  p.max_position_embeddings = shape.max_position_embeddings;
  p.max_tensor_parallel = shape.num_attention_heads;
  p.weight_dtype_bytes = shape.dtype_bytes;

  const std::int64_t hidden = shape.hidden_size;
  const std::int64_t q_width = static_cast<std::int64_t>(shape.num_attention_heads) * shape.head_dim;
  const std::int64_t kv_width = static_cast<std::int64_t>(shape.num_kv_heads) * shape.head_dim;
  // Per layer: q, k, v, o projections; gate, up, down; two RMSNorm weights.
  const std::int64_t attention_params = hidden * q_width + 2 * hidden * kv_width + q_width * hidden;
  const std::int64_t mlp_params = 3 * hidden * shape.intermediate_size;
  const std::int64_t per_layer = attention_params + mlp_params + 2 * hidden;

  LayerGroup layers;
  layers.name = "decoder";
  layers.num_layers = shape.num_layers;
  layers.dense_params = per_layer * shape.num_layers;
  layers.dense_weight_bytes = static_cast<double>(layers.dense_params) * shape.dtype_bytes;
  // Causal attention: per query and context position, QK^T and PV are
  // 2 x head_dim multiply-adds per query head: 4 x heads x head_dim FLOPs.
  layers.attention.flops_per_query_context_token = 4.0 * static_cast<double>(q_width) * shape.num_layers;
  // A decode query reads K and V of every position of every layer.
  const double kv_per_token = 2.0 * static_cast<double>(kv_width) * shape.dtype_bytes * shape.num_layers;
  layers.attention.scan_bytes_per_context_token = kv_per_token;
  p.layer_groups.push_back(layers);

  p.embedding_params = hidden * shape.vocab_size;
  p.head_params = hidden * shape.vocab_size;
  p.head_tied_to_embedding = shape.tie_word_embeddings;
  const double table_bytes = static_cast<double>(p.embedding_params) * shape.dtype_bytes;
  // A tied head is the embedding table itself: held once.
  p.embedding_head_bytes = shape.tie_word_embeddings ? table_bytes : 2 * table_bytes;
  p.replicated_weight_bytes = 2.0 * static_cast<double>(hidden) * shape.dtype_bytes * shape.num_layers;

  p.kv_bytes_per_token = kv_per_token;
  p.kv_bytes_per_token_fp8 = kv_per_token / shape.dtype_bytes;  // one byte per value
  return p;
}

}  // namespace sluice::sim
