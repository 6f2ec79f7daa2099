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

ModelProfile make_deepseek_v3_profile(const DeepseekV3ProfileShape& shape) {
  ModelProfile p;
  p.name = shape.name;
  p.source = "DeepSeek-V3 shape (MLA, DeepSeekMoE)";
  p.num_layers = shape.num_layers;
  p.hidden_size = shape.hidden_size;
  p.num_attention_heads = shape.num_attention_heads;
  p.num_kv_heads = 1;  // the latent is shared by every head
  p.head_dim = shape.kv_lora_rank + shape.qk_rope_head_dim;
  p.intermediate_size = shape.moe_intermediate_size;
  p.vocab_size = shape.vocab_size;
  p.max_position_embeddings = shape.max_position_embeddings;
  p.max_tensor_parallel = shape.num_attention_heads;
  p.weight_dtype_bytes = shape.linear_weight_bytes;
  p.gemm_uses_fp8 = shape.linear_weight_bytes < 2;
  p.deepseek_v3_kernels = true;

  const std::int64_t hidden = shape.hidden_size, heads = shape.num_attention_heads;
  const std::int64_t qk_head = shape.qk_nope_head_dim + shape.qk_rope_head_dim;
  const std::int64_t latent = shape.kv_lora_rank + shape.qk_rope_head_dim;
  const std::int64_t q_params = shape.q_lora_rank > 0
                                    ? hidden * shape.q_lora_rank + std::int64_t{shape.q_lora_rank} * heads * qk_head
                                    : hidden * heads * qk_head;
  const std::int64_t attention_linear = q_params + hidden * latent +
                                        std::int64_t{shape.kv_lora_rank} * heads *
                                            (shape.qk_nope_head_dim + shape.v_head_dim) +
                                        heads * shape.v_head_dim * hidden;
  const std::int64_t norms = 2 * hidden + shape.kv_lora_rank + shape.q_lora_rank;
  const std::int64_t expert_params = 3 * hidden * shape.moe_intermediate_size;
  const std::int64_t router = std::int64_t{shape.num_routed_experts} * (hidden + 1);

  // Absorbed MLA per query and context position: QK^T over the 576-wide
  // latent + rope key and PV over the 512-wide latent, for every head.
  // A chunk of several rows (sluice's MLA prefill, as vLLM's) decompresses
  // the context's K and V through kv_b_proj and runs QK 192 / V 128 a head.
  AttentionCost attention_per_layer;
  attention_per_layer.flops_per_query_context_token = 2.0 * heads * (latent + shape.kv_lora_rank);
  attention_per_layer.scan_bytes_per_context_token = static_cast<double>(latent) * shape.dtype_bytes;
  attention_per_layer.chunk_flops_per_query_context_token = 2.0 * heads * (qk_head + shape.v_head_dim);
  attention_per_layer.chunk_flops_per_context_token =
      2.0 * heads * (shape.qk_nope_head_dim + shape.v_head_dim) * shape.kv_lora_rank;
  auto group = [&](std::string name, std::int32_t num_layers, std::int64_t linear_params,
                   std::int64_t other_params) {
    LayerGroup g;
    g.name = std::move(name);
    g.num_layers = num_layers;
    g.dense_params = (linear_params + other_params) * num_layers;
    g.dense_weight_bytes = (static_cast<double>(linear_params) * shape.linear_weight_bytes +
                            static_cast<double>(other_params) * shape.dtype_bytes) *
                           num_layers;
    // Every field of attention_per_layer is a per-layer cost: the group's is num_layers of them.
    g.attention = attention_per_layer;
    for (double* cost : {&g.attention.flops_per_query_context_token, &g.attention.scan_bytes_per_context_token,
                         &g.attention.chunk_flops_per_query_context_token, &g.attention.chunk_flops_per_context_token})
      *cost *= num_layers;
    return g;
  };
  const std::int32_t num_dense = std::min(shape.num_dense_layers, shape.num_layers);
  if (num_dense > 0)
    p.layer_groups.push_back(group("dense", num_dense, attention_linear + 3 * hidden * shape.intermediate_size, norms));
  if (shape.num_layers > num_dense) {
    LayerGroup moe = group("moe", shape.num_layers - num_dense,
                           attention_linear + std::int64_t{shape.num_shared_experts} * expert_params,
                           norms + router);
    moe.num_routed_experts = shape.num_routed_experts;
    moe.num_experts_per_token = shape.num_experts_per_token;
    moe.expert_params = expert_params;
    moe.expert_weight_bytes = static_cast<double>(expert_params) * shape.linear_weight_bytes;
    p.layer_groups.push_back(moe);
  }

  p.embedding_params = hidden * shape.vocab_size;
  p.head_params = hidden * shape.vocab_size;
  p.embedding_head_bytes = 2.0 * static_cast<double>(p.embedding_params) * shape.dtype_bytes;
  // Norms, router and the latent projection are held whole on every TP rank.
  p.replicated_weight_bytes =
      static_cast<double>(shape.num_layers) *
      (static_cast<double>(norms + router) * shape.dtype_bytes + static_cast<double>(hidden * latent) *
                                                                     shape.linear_weight_bytes);
  p.kv_bytes_per_token = static_cast<double>(latent) * shape.dtype_bytes * shape.num_layers;
  p.kv_bytes_per_token_fp8 = static_cast<double>(latent) * shape.num_layers;
  return p;
}

}  // namespace sluice::sim
