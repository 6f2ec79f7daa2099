#include "sluice/model/deepseek_v3.h"

#include <cmath>

#include <fmt/format.h>

#include "sluice/model/deepseek_v3_config.h"
#include "sluice/model/tensor_parallel.h"

namespace sluice {
namespace {

// transformers builds q_a_layernorm and kv_a_layernorm without the config's
// rms_norm_eps: they keep DeepseekV3RMSNorm's default.
constexpr float kLatentNormEps = 1e-6f;

// YaRN's magnitude correction, 0.1 * mscale * ln(scale) + 1 (1 when not stretched).
double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

RopeParams rope_params(const ModelConfig& config) {
  const DeepseekV3Config& ds = *config.deepseek_v3;
  RopeParams rope{.head_dim = ds.qk_rope_head_dim, .theta = config.rope_theta, .interleaved = ds.rope_interleave};
  if (!config.rope_yarn) return rope;
  const YarnRopeScaling& yarn = *config.rope_yarn;
  rope.yarn_factor = yarn.factor;
  rope.yarn_original_max_position = yarn.original_max_position_embeddings;
  rope.yarn_beta_fast = yarn.beta_fast;
  rope.yarn_beta_slow = yarn.beta_slow;
  rope.yarn_truncate = yarn.truncate;
  rope.cos_sin_scale = yarn_attention_factor(yarn);
  return rope;
}

// 1/sqrt(qk_head_dim), times mscale(factor, mscale_all_dim)^2 under YaRN.
float softmax_scale(const ModelConfig& config) {
  double scale = 1.0 / std::sqrt(static_cast<double>(config.deepseek_v3->qk_head_dim()));
  if (config.rope_yarn && config.rope_yarn->mscale_all_dim > 0) {
    const double m = yarn_mscale(config.rope_yarn->factor, config.rope_yarn->mscale_all_dim);
    scale *= m * m;
  }
  return static_cast<float>(scale);
}

std::vector<std::pair<std::string, Shape>> gate_up_parts(const std::string& prefix, std::int64_t inter,
                                                         std::int64_t hidden) {
  return {{prefix + "gate_proj.weight", {inter, hidden}}, {prefix + "up_proj.weight", {inter, hidden}}};
}

}  // namespace

Result<std::unique_ptr<DeepseekV3Model>> DeepseekV3Model::load(const ModelConfig& config,
                                                               const Checkpoint& checkpoint, Ops& ops,
                                                               const LoadProgress& progress, Communicator* comm,
                                                               bool expert_parallel) {
  SLUICE_CHECK(config.deepseek_v3.has_value());
  const WeightShard shard{.rank = comm ? comm->rank() : 0, .size = comm ? comm->size() : 1};
  SLUICE_TRY(check_tensor_parallel(config, shard.size, expert_parallel));
  auto owned = std::make_unique<DeepseekV3Model>();
  DeepseekV3Model& model = *owned;
  model.config_ = config;
  model.ds_ = *config.deepseek_v3;
  model.comm_ = shard.size > 1 ? comm : nullptr;
  const DeepseekV3Config& ds = model.ds_;
  model.rope_ = rope_params(config);
  model.mla_ = MlaShape{.num_heads = config.num_heads / shard.size,
                        .qk_nope_head_dim = ds.qk_nope_head_dim,
                        .qk_rope_head_dim = ds.qk_rope_head_dim,
                        .v_head_dim = ds.v_head_dim,
                        .kv_lora_rank = ds.kv_lora_rank,
                        .softmax_scale = softmax_scale(config)};
  model.routing_ = MoeRouting{.num_experts = ds.n_routed_experts,
                              .num_experts_per_token = ds.num_experts_per_tok,
                              .num_groups = ds.n_group,
                              .num_groups_selected = ds.topk_group,
                              .normalize = ds.norm_topk_prob,
                              .scale = ds.routed_scaling_factor};
  const std::int64_t hidden = config.hidden_size, vocab = config.vocab_size, heads = config.num_heads;
  const std::int64_t q_dim = heads * ds.qk_head_dim();
  const std::int64_t moe_inter = ds.moe_intermediate_size;
  const std::int64_t shared_inter = moe_inter * ds.n_shared_experts;
  model.dense_intermediate_ = config.intermediate_size / shard.size;
  model.shared_intermediate_ = shared_inter / shard.size;
  model.first_token_id_ = config.vocab_size / shard.size * shard.rank;
  // Expert parallelism: this rank's whole experts; otherwise every expert, its width split.
  const std::int32_t num_local_experts = expert_parallel ? ds.n_routed_experts / shard.size : ds.n_routed_experts;
  const std::int32_t first_expert = expert_parallel ? num_local_experts * shard.rank : 0;
  const WeightShard expert_shard = expert_parallel ? WeightShard{} : shard;
  WeightBinder bind(checkpoint, ops, progress, config.fp8, model.dequantized_);
  SLUICE_TRY_ASSIGN(embed, bind.row_shards({{"model.embed_tokens.weight", {vocab, hidden}}}, shard));
  model.embed_tokens_ = embed;
  for (std::int32_t i = 0; i < config.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    const std::string a = p + "self_attn.";
    Layer layer;
    SLUICE_TRY_ASSIGN(input_norm, bind.weight(p + "input_layernorm.weight", {hidden}));
    layer.input_norm = input_norm;
    Attention& attn = layer.attention;
    // Column-parallel: each rank's heads are contiguous rows of q_b_proj (q_proj) and kv_b_proj.
    if (ds.q_lora_rank) {
      const std::int64_t rank = *ds.q_lora_rank;
      SLUICE_TRY_ASSIGN(q_a, bind.weight(a + "q_a_proj.weight", {rank, hidden}));
      SLUICE_TRY_ASSIGN(q_a_norm, bind.weight(a + "q_a_layernorm.weight", {rank}));
      SLUICE_TRY_ASSIGN(q_b, bind.row_shards({{a + "q_b_proj.weight", {q_dim, rank}}}, shard));
      attn.q_a_proj = q_a;
      attn.q_a_norm = q_a_norm;
      attn.q_proj = q_b;
    } else {
      SLUICE_TRY_ASSIGN(q, bind.row_shards({{a + "q_proj.weight", {q_dim, hidden}}}, shard));
      attn.q_proj = q;
    }
    // forward() slices the latent rows from the rope key rows; mla_attention
    // reads kv_b_proj itself (not through matmul), so it is never kept FP8
    // (a shard is never FP8).
    SLUICE_TRY_ASSIGN(kv_a, bind.weight(a + "kv_a_proj_with_mqa.weight", {ds.latent_cache_dim(), hidden},
                                        {.row_slice_at = ds.kv_lora_rank}));
    SLUICE_TRY_ASSIGN(kv_a_norm, bind.weight(a + "kv_a_layernorm.weight", {ds.kv_lora_rank}));
    const Shape kv_b_shape{heads * (ds.qk_nope_head_dim + ds.v_head_dim), ds.kv_lora_rank};
    SLUICE_TRY_ASSIGN(kv_b, shard.size > 1 ? bind.row_shards({{a + "kv_b_proj.weight", kv_b_shape}}, shard)
                                           : bind.weight(a + "kv_b_proj.weight", kv_b_shape, {.matmul_only = false}));
    SLUICE_TRY_ASSIGN(o, bind.column_shard(a + "o_proj.weight", {hidden, heads * ds.v_head_dim}, shard));
    attn.kv_a_proj = kv_a;
    attn.kv_a_norm = kv_a_norm;
    attn.kv_b_proj = kv_b;
    attn.o_proj = o;
    SLUICE_TRY_ASSIGN(post_norm, bind.weight(p + "post_attention_layernorm.weight", {hidden}));
    layer.post_attention_norm = post_norm;
    const std::string m = p + "mlp.";
    if (!ds.is_moe_layer(i)) {
      SLUICE_TRY_ASSIGN(gate_up, bind.row_shards(gate_up_parts(m, config.intermediate_size, hidden), shard));
      SLUICE_TRY_ASSIGN(down, bind.column_shard(m + "down_proj.weight", {hidden, config.intermediate_size}, shard));
      layer.dense_gate_up = gate_up;
      layer.dense_down = down;
    } else {
      Moe moe;
      SLUICE_TRY_ASSIGN(router, bind.weight(m + "gate.weight", {ds.n_routed_experts, hidden}));
      SLUICE_TRY_ASSIGN(bias, bind.weight(m + "gate.e_score_correction_bias", {ds.n_routed_experts}));
      std::vector<std::pair<std::string, Shape>> gate_up, down;
      for (std::int32_t e = first_expert; e < first_expert + num_local_experts; ++e) {
        const std::string x = fmt::format("{}experts.{}.", m, e);
        for (auto& part : gate_up_parts(x, moe_inter, hidden)) gate_up.push_back(std::move(part));
        down.push_back({x + "down_proj.weight", {hidden, moe_inter}});
      }
      if (num_local_experts < ds.n_routed_experts)
        bind.skip(m + "experts.", fmt::format("routed experts of the other expert-parallel ranks (rank {} holds {}-{})",
                                              shard.rank, first_expert, first_expert + num_local_experts - 1));
      // moe_experts takes gate_up and down in one dtype: FP8 only if both can stay FP8.
      auto shapes = [](const std::vector<std::pair<std::string, Shape>>& parts) {
        std::vector<Shape> out;
        for (const auto& part : parts) out.push_back(part.second);
        return out;
      };
      const WeightUse experts_use{.matmul_only = bind.keeps_fp8(shapes(gate_up)) && bind.keeps_fp8(shapes(down))};
      if (expert_shard.size > 1) {
        // Every expert's width split: this rank's rows of each gate and up
        // (stacked per expert as moe_experts reads them), its columns of each down.
        SLUICE_TRY_ASSIGN(experts_gate_up, bind.row_shards(gate_up, expert_shard));
        SLUICE_TRY_ASSIGN(experts_down, bind.column_shards(down, expert_shard));
        moe.experts = MoeExpertWeights{.gate_up = experts_gate_up, .down = experts_down};
      } else {
        SLUICE_TRY_ASSIGN(experts_gate_up, bind.concatenated(gate_up, experts_use));
        SLUICE_TRY_ASSIGN(experts_down, bind.concatenated(down, experts_use));
        moe.experts =
            MoeExpertWeights{.gate_up = experts_gate_up, .down = experts_down, .first_expert = first_expert};
      }
      SLUICE_TRY_ASSIGN(shared_gate_up,
                        bind.row_shards(gate_up_parts(m + "shared_experts.", shared_inter, hidden), shard));
      SLUICE_TRY_ASSIGN(shared_down,
                        bind.column_shard(m + "shared_experts.down_proj.weight", {hidden, shared_inter}, shard));
      moe.router = router;
      moe.correction_bias = bias;
      moe.shared_gate_up = shared_gate_up;
      moe.shared_down = shared_down;
      layer.moe = moe;
    }
    model.layers_.push_back(layer);
  }
  SLUICE_TRY_ASSIGN(final_norm, bind.weight("model.norm.weight", {hidden}));
  SLUICE_TRY_ASSIGN(lm_head, bind.row_shards({{"lm_head.weight", {vocab, hidden}}}, shard));
  model.final_norm_ = final_norm;
  model.lm_head_ = lm_head;
  for (std::int32_t j = 0; j < ds.num_nextn_predict_layers; ++j)
    bind.skip(fmt::format("model.layers.{}.", config.num_layers + j),
              "a multi-token-prediction layer (num_nextn_predict_layers); sluice does not run speculative decoding "
              "yet");
  SLUICE_TRY(bind.reject_unused());
  return owned;
}

KvCacheSpec DeepseekV3Model::kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const {
  return KvCacheSpec{.num_layers = config_.num_layers,
                     .num_blocks = num_blocks,
                     .block_size_tokens = block_size_tokens,
                     .num_kv_heads = 1,
                     .head_dim = ds_.latent_cache_dim(),
                     .layout = KvCacheLayout::latent};
}

Result<Tensor> DeepseekV3Model::forward(Ops& ops, const StepLayout& layout) const {
  const std::int64_t n = layout.num_rows();
  const std::int64_t hidden = config_.hidden_size, heads = mla_.num_heads;  // this rank's heads
  const float eps = config_.rms_norm_eps;
  const std::int64_t rank = ds_.kv_lora_rank, rope_dim = ds_.qk_rope_head_dim;
  const std::int64_t k = ds_.num_experts_per_tok;

  // Scratch lives until the next step: allocate once, reuse in every layer.
  Tensor residual = ops.scratch({n, hidden});
  Tensor normed = ops.scratch({n, hidden});
  Tensor q_a = ds_.q_lora_rank ? ops.scratch({n, std::int64_t{*ds_.q_lora_rank}}) : Tensor{};
  Tensor q = ops.scratch({n, heads * ds_.qk_head_dim()});
  Tensor latent = ops.scratch({n, rank});
  Tensor k_rope = ops.scratch({n, rope_dim});
  Tensor attn = ops.scratch({n, heads * ds_.v_head_dim});
  Tensor block_out = ops.scratch({n, hidden});
  Tensor dense_gate_up = ops.scratch({n, 2 * dense_intermediate_});
  Tensor dense_act = ops.scratch({n, dense_intermediate_});
  Tensor router_logits = ops.scratch({n, std::int64_t{ds_.n_routed_experts}}, DType::f32);
  const MoeAssignment routed{.expert_ids = ops.scratch({n, k}, DType::i32),
                             .expert_weights = ops.scratch({n, k}, DType::f32)};
  Tensor shared_gate_up = ops.scratch({n, 2 * shared_intermediate_});
  Tensor shared_act = ops.scratch({n, shared_intermediate_});

  SLUICE_TRY(embed_tokens(ops, comm_, embed_tokens_, first_token_id_, residual));
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    const Attention& a = layer.attention;
    if (l == 0)
      ops.rms_norm(residual, layer.input_norm, eps, normed);
    else
      ops.add_rms_norm(residual, block_out, layer.input_norm, eps, normed);

    // MLA: queries, the latent and the shared rope key.
    if (ds_.q_lora_rank) {
      ops.matmul(normed, a.q_a_proj, Tensor{}, q_a);
      ops.rms_norm(q_a, a.q_a_norm, kLatentNormEps, q_a);
      ops.matmul(q_a, a.q_proj, Tensor{}, q);
    } else {
      ops.matmul(normed, a.q_proj, Tensor{}, q);
    }
    ops.matmul(normed, a.kv_a_proj.row_slice(0, rank), Tensor{}, latent);
    ops.rms_norm(latent, a.kv_a_norm, kLatentNormEps, latent);
    ops.matmul(normed, a.kv_a_proj.row_slice(rank, rope_dim), Tensor{}, k_rope);
    SLUICE_TRY(ops.rope_partial(q, ds_.qk_head_dim(), ds_.qk_nope_head_dim, rope_));
    SLUICE_TRY(ops.rope_partial(k_rope, static_cast<std::int32_t>(rope_dim), 0, rope_));
    SLUICE_TRY(ops.mla_attention(static_cast<std::int32_t>(l),
                                 {.q = q, .latent = latent, .k_rope = k_rope, .kv_b_proj = a.kv_b_proj}, mla_, attn));
    ops.matmul(attn, a.o_proj, Tensor{}, block_out);
    SLUICE_TRY(all_reduce(comm_, block_out));

    ops.add_rms_norm(residual, block_out, layer.post_attention_norm, eps, normed);
    if (!layer.moe) {
      ops.gate_up_silu(normed, layer.dense_gate_up, dense_gate_up, dense_act);
      ops.matmul(dense_act, layer.dense_down, Tensor{}, block_out);
      SLUICE_TRY(all_reduce(comm_, block_out));
      continue;
    }
    // DeepSeekMoE: the shared experts' output, then the routed experts added
    // to it; with ranks, each rank's shares, summed by one all-reduce.
    const Moe& moe = *layer.moe;
    ops.matmul(normed, moe.router, Tensor{}, router_logits);
    SLUICE_TRY(ops.moe_route(router_logits, moe.correction_bias, routing_, routed));
    ops.gate_up_silu(normed, moe.shared_gate_up, shared_gate_up, shared_act);
    ops.matmul(shared_act, moe.shared_down, Tensor{}, block_out);
    SLUICE_TRY(ops.moe_experts(normed, moe.experts, routed, block_out));
    SLUICE_TRY(all_reduce(comm_, block_out));
  }
  const Tensor logits = final_logits(ops, layout, {.residual = residual, .block_out = block_out,
                                                   .final_norm = final_norm_, .eps = eps, .lm_head = lm_head_,
                                                   .normed = normed});
  return gather_logits(ops, comm_, logits, config_.vocab_size);
}

}  // namespace sluice
