// The DeepSeek-V4 profile from its config.json shapes (model_profile.h).
#include <string>

#include "sluice/common/check.h"
#include "sluice/model/config.h"
#include "sluice/model/deepseek_v4_kv_layout.h"
#include "sluice/sim/model_profile.h"

namespace sluice::sim {
namespace {

constexpr double kBf16Bytes = 2.0;
constexpr double kF32Bytes = 4.0;

struct LayerCost {
  std::int64_t linear_params = 0;  // at the checkpoint's linear weight bytes
  std::int64_t bf16_params = 0;    // router, norms, compressors, indexer projections
  std::int64_t f32_params = 0;     // mHC
};

}  // namespace

ModelProfile make_deepseek_v4_profile(const std::string& name, const ModelConfig& config) {
  SLUICE_CHECK(config.deepseek_v4 != nullptr);
  const DeepseekV4Config& ds = *config.deepseek_v4;
  const std::int64_t hidden = config.hidden_size, heads = config.num_heads, hd = config.head_dim;
  const std::int64_t q_lora = ds.q_lora_rank, o_lora = ds.o_lora_rank, groups = ds.o_groups;
  const std::int64_t experts = ds.n_routed_experts, inter = ds.moe_intermediate_size, hc = ds.hc_mult;
  const std::int64_t index_heads = ds.index_n_heads, index_dim = ds.index_head_dim, window = ds.sliding_window;
  const double linear_bytes = config.fp8 ? 1.0 : kBf16Bytes;

  ModelProfile p;
  p.name = name;
  p.source = "DeepSeek-V4 shape (shared-KV sparse attention, CSA/HCA, mHC, MoE)";
  p.num_layers = config.num_layers;
  p.hidden_size = config.hidden_size;
  p.num_attention_heads = config.num_heads;
  p.num_kv_heads = 1;  // one shared K=V latent, replicated on every TP rank
  p.head_dim = config.head_dim;
  p.intermediate_size = ds.moe_intermediate_size;
  p.vocab_size = config.vocab_size;
  p.max_position_embeddings = config.max_position_embeddings;
  p.max_tensor_parallel = ds.o_groups;  // the grouped output projection splits by group
  p.residual_streams = ds.hc_mult;
  p.weight_dtype_bytes = linear_bytes;
  p.gemm_uses_fp8 = config.fp8.has_value();
  p.deepseek_v4_kernels = true;

  // Every layer: q_a/q_b, the latent, grouped wo_a/wo_b, the shared expert;
  // router, norms and mHC.
  LayerCost common{.linear_params = hidden * q_lora + q_lora * heads * hd + hd * hidden + heads * hd * o_lora +
                                    hidden * groups * o_lora + 3 * hidden * inter,
                   .bf16_params = experts * (hidden + 1) + 2 * hidden + q_lora + hd,
                   .f32_params = 2 * ((2 + hc) * hc * hc * hidden + (2 + hc) * hc + 3)};
  const auto compressor = [&](std::int64_t dim, std::int64_t width, std::int64_t rate) {
    return 2 * width * hidden + rate * width + dim;  // wkv, wgate, ape, norm
  };
  const DeepseekV4KvRecords records = DeepseekV4KvRecords::cuda_fp8(config);
  const double flops_per_entry = 4.0 * static_cast<double>(heads * hd);  // QK^T and PV over the shared latent

  auto group = [&](std::string group_name, std::int32_t num_layers, const LayerCost& cost) {
    LayerGroup g;
    g.name = std::move(group_name);
    g.num_layers = num_layers;
    g.dense_params = (cost.linear_params + cost.bf16_params + cost.f32_params) * num_layers;
    g.dense_weight_bytes = (static_cast<double>(cost.linear_params) * linear_bytes +
                            static_cast<double>(cost.bf16_params) * kBf16Bytes +
                            static_cast<double>(cost.f32_params) * kF32Bytes) *
                           num_layers;
    g.num_routed_experts = ds.n_routed_experts;
    g.num_experts_per_token = ds.num_experts_per_tok;
    g.expert_params = 3 * hidden * inter;
    // FP4 experts are held as FP8 on the device: SM90 has no FP4 MMA, and
    // sluice's CUDA forward widens them to e4m3 at load (one byte a weight,
    // as the FP8 experts of an FP8 checkpoint).
    g.expert_weight_bytes = static_cast<double>(g.expert_params) * linear_bytes;
    // Every query attends its window; the per-kind terms are added below.
    g.attention.flops_per_query = flops_per_entry * static_cast<double>(window) * num_layers;
    g.attention.gather_bytes_per_query = records.latent_bytes * static_cast<double>(window) * num_layers;
    return g;
  };
  std::int32_t num_sliding = 0, num_csa = 0, num_hca = 0;
  for (DeepseekV4Attention type : ds.layer_types) {
    num_sliding += type == DeepseekV4Attention::sliding;
    num_csa += type == DeepseekV4Attention::compressed_sparse;
    num_hca += type == DeepseekV4Attention::heavily_compressed;
  }
  if (num_sliding > 0) p.layer_groups.push_back(group("sliding", num_sliding, common));
  if (num_csa > 0) {
    // Its compressor (overlapping windows), the indexer's q_b, head weights
    // and compressor; attention adds the top-k entries, the indexer scans
    // every visible key (one per csa rate positions) in FP8.
    LayerCost csa = common;
    csa.bf16_params += compressor(hd, 2 * hd, ds.csa_compress_rate) + index_heads * index_dim * q_lora +
                       index_heads * hidden + compressor(index_dim, 2 * index_dim, ds.csa_compress_rate);
    LayerGroup g = group("csa", num_csa, csa);
    const double rate = ds.csa_compress_rate;
    g.attention.flops_per_query += flops_per_entry * ds.index_topk * num_csa;
    g.attention.gather_bytes_per_query += records.latent_bytes * ds.index_topk * num_csa;
    g.attention.flops_per_query_context_token = 2.0 * static_cast<double>(index_heads * index_dim) / rate * num_csa;
    g.attention.scan_bytes_per_context_token = records.index_key_bytes / rate * num_csa;
    g.attention.scan_uses_fp8 = true;
    p.layer_groups.push_back(g);
  }
  if (num_hca > 0) {
    // Its compressor (disjoint windows); attention reads every entry.
    LayerCost hca = common;
    hca.bf16_params += compressor(hd, hd, ds.hca_compress_rate);
    LayerGroup g = group("hca", num_hca, hca);
    const double rate = ds.hca_compress_rate;
    g.attention.flops_per_query_context_token = flops_per_entry / rate * num_hca;
    g.attention.scan_bytes_per_context_token = records.latent_bytes / rate * num_hca;
    p.layer_groups.push_back(g);
  }

  p.embedding_params = std::int64_t{config.vocab_size} * hidden;
  p.head_params = std::int64_t{config.vocab_size} * hidden;
  p.embedding_head_bytes = 2.0 * kBf16Bytes * static_cast<double>(p.embedding_params);
  // Replicated on every TP rank: the latent projection, norms, router, mHC
  // (as the reference shards only query heads and the output groups).
  p.replicated_weight_bytes = static_cast<double>(config.num_layers) *
                              (static_cast<double>(hd * hidden) * linear_bytes +
                               static_cast<double>(experts * (hidden + 1) + 2 * hidden + q_lora + hd) * kBf16Bytes +
                               static_cast<double>(common.f32_params) * kF32Bytes);

  // The KV cache as the paged layout stores it with CUDA's records; the
  // block size is free but for its alignment, which the footprint ignores.
  const std::int32_t alignment = deepseek_v4_block_alignment(config);
  auto layout = DeepseekV4KvLayout::make(config, alignment);
  SLUICE_CHECK(layout.ok());
  const DeepseekV4KvFootprint footprint = layout->footprint(records);
  p.kv_bytes_per_token = footprint.compressed_bytes_per_token;
  // Those records are FP8 already: --kv-cache-dtype fp8 prices the same
  // design, and only the served area below changes (fp8_ds_mla latents).
  p.kv_bytes_per_token_fp8 = p.kv_bytes_per_token;
  p.kv_window_tokens = ds.sliding_window;
  p.kv_state_bytes_per_sequence = footprint.window_ring_bytes_per_sequence + footprint.state_bytes_per_sequence;
  p.kv_block_alignment_tokens = alignment;
  // The CUDA forward keeps its own block area (bf16 latents and entries, or
  // fp8_ds_mla ones with --kv-cache-dtype fp8; e4m3 index keys, f32 pool
  // states), not the records above, in serve's default blocks.
  p.kv_default_block_tokens = deepseek_v4_default_block_size(config);
  p.kv_bytes_per_token_served = [config](std::int32_t block_size_tokens, KvCacheDtype dtype) {
    auto served = DeepseekV4KvLayout::make(
        config, block_size_tokens,
        dtype == KvCacheDtype::kFp8 ? DeepseekV4KvFormats::cuda_fp8() : DeepseekV4KvFormats::cuda());
    SLUICE_CHECK(served.ok());
    return static_cast<double>(served->floats_per_block()) * kF32Bytes / block_size_tokens;
  };
  return p;
}

}  // namespace sluice::sim
