// ModelProfile: the shape numbers of a model that decide its cost and memory,
// nothing else. Built-in profiles for the models sluice plans for; a profile
// can also be built from a Hugging Face config.json (dense Llama family).
//
// The stack is a list of LayerGroups so that a model whose layers differ
// (DeepSeek-V4.1-Flash's encoder half runs on every prompt token, its decoder
// half only on the last 128 of each prefill: "8B active per prompt token, 16B
// per output token") is described by data, not by special cases in the cost
// model.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/model/kv_cache_dtype.h"
#include "sluice/common/result.h"

namespace sluice {
struct ModelConfig;
}

namespace sluice::sim {

// Which tokens of a step run through a layer group.
enum class TokenScope {
  kAllTokens,   // every new token (ordinary decoder layers)
  kReplayTail,  // only the last `decoder_replay_tokens` of each sequence's chunk
};

// Attention work per query token, summed over the group's layers. A query at
// position p sees p + 1 context positions; the "per context token" terms scale
// with that, the "per query" terms do not (sparse attention's fixed top-k).
struct AttentionCost {
  double flops_per_query = 0;                 // window + selected entries (sparse)
  double flops_per_query_context_token = 0;   // dense QK^T+PV, or the indexer's scan
  double gather_bytes_per_query = 0;          // KV entries fetched per query, fixed count
  double scan_bytes_per_context_token = 0;    // KV (dense) or index keys (sparse) read per position
  bool scan_uses_fp8 = false;                 // the position-dependent math runs on FP8 MMA
  // A chunk of more than one row may run another form than decode's (MLA:
  // K and V decompressed from the latent, QK 192 / V 128 a head, where decode
  // runs the absorbed MQA over the 576-wide latent): its math per query and
  // context position, and per context position once a chunk (the K/V
  // decompression GEMM over the whole context). 0: the decode form throughout.
  double chunk_flops_per_query_context_token = 0;
  double chunk_flops_per_context_token = 0;
};

// A run of layers with the same cost. Totals are over the group's layers;
// expert numbers are per routed expert per layer.
struct LayerGroup {
  std::string name;
  std::int32_t num_layers = 0;
  TokenScope scope = TokenScope::kAllTokens;
  std::int64_t dense_params = 0;        // attention projections, dense/shared MLP, router
  double dense_weight_bytes = 0;        // their bytes on the GPU (all TP ranks together)
  std::int32_t num_routed_experts = 0;  // 0: no routed MoE in this group
  std::int32_t num_experts_per_token = 0;
  std::int64_t expert_params = 0;       // one routed expert in one layer
  double expert_weight_bytes = 0;       // its bytes, scales included
  AttentionCost attention;

  std::int64_t active_params_per_token() const {
    return dense_params + static_cast<std::int64_t>(num_layers) * num_experts_per_token * expert_params;
  }
  std::int64_t total_params() const {
    return dense_params + static_cast<std::int64_t>(num_layers) * num_routed_experts * expert_params;
  }
};

struct ModelProfile {
  std::string name;
  std::string source;  // where the numbers come from (one line)

  // Shape (informational and for validation of parallelism).
  std::int32_t num_layers = 0;
  std::int32_t hidden_size = 0;
  std::int32_t num_attention_heads = 0;
  std::int32_t num_kv_heads = 0;        // 1 = one shared latent, replicated on every TP rank
  std::int32_t head_dim = 0;
  std::int32_t intermediate_size = 0;   // dense MLP width, or one routed expert's width
  std::int32_t vocab_size = 0;
  std::int32_t max_position_embeddings = 0;
  std::int32_t max_tensor_parallel = 0; // largest TP the attention can be split into
  std::int32_t residual_streams = 1;    // hyper-connection copies of the hidden state
  double weight_dtype_bytes = 2;        // dense weights (2 = bf16, 1 = fp8)
  bool gemm_uses_fp8 = false;           // GEMMs run on FP8 MMA (fp8/fp4 checkpoints)
  // Runs DeepSeek-V4's kernels (sparse CSA/HCA attention, the indexer, mHC,
  // hash/sqrtsoftplus MoE): sluice_cuda_hardware() prices it with their
  // measured efficiencies, not the dense family's.
  bool deepseek_v4_kernels = false;
  // Runs DeepSeek-V3's MLA and FP8 MoE kernels: priced with their measured
  // efficiencies (h200_sluice_cuda_deepseek_v3()).
  bool deepseek_v3_kernels = false;

  std::vector<LayerGroup> layer_groups;
  // CED decoder replay: a kReplayTail group runs on this many last tokens of
  // each chunk (0 when the model has no such group).
  std::int32_t decoder_replay_tokens = 0;

  // Outside the layer groups.
  std::int64_t embedding_params = 0;    // a lookup: its rows are read, not multiplied
  std::int64_t head_params = 0;         // vocab x hidden: one GEMM row per sampled sequence
  bool head_tied_to_embedding = false;  // the head is the embedding table (counted once)
  double embedding_head_bytes = 0;      // both tables on the GPU
  double other_gpu_weight_bytes = 0;    // held but not run in a plain step (draft head, vision)
  double replicated_weight_bytes = 0;   // held whole on every TP rank (norms, router, latent KV proj)

  // KV cache, "auto" dtype (what the checkpoint's attention writes).
  double kv_bytes_per_token = 0;        // global KV of one position, all layers, all kv heads
  double kv_bytes_per_token_fp8 = 0;    // with --kv-cache-dtype fp8 (0: not offered)
  std::int32_t kv_window_tokens = 0;    // sliding window kept per sequence (0: none)
  double kv_state_bytes_per_sequence = 0;  // window rings and compressor tails, per sequence
  std::int32_t kv_block_alignment_tokens = 1;  // a block size must be a multiple (DeepSeek-V4: its compress rates)
  std::int32_t kv_default_block_tokens = 0;    // serve's block size without --block-size (0: the engine's 16)
  // What sluice's CUDA server allocates a token today in blocks of the given
  // size with --kv-cache-dtype `dtype`, where that is not the layout above
  // (DeepSeek-V4: its block area, each block's last window and pool states
  // included, docs/kv-v4.md); empty: the same.
  std::function<double(std::int32_t block_size_tokens, KvCacheDtype dtype)> kv_bytes_per_token_served;

  // Host-resident tables (DeepSeek Engram): held in host RAM, rows fetched per token.
  double host_table_bytes = 0;
  double host_bytes_per_token = 0;

  // Workspace that scales with --max-model-len (DeepSeek's indexer prefill
  // buffer: vLLM measured ~5.2 GiB at 1M context).
  double workspace_bytes_per_context_token = 0;

  // Derived.
  std::int64_t total_params() const;                    // GPU-resident weights, all experts
  std::int64_t active_params_per_prompt_token() const;  // kAllTokens groups only
  std::int64_t active_params_per_output_token() const;  // every group, plus the head
  double gpu_weight_bytes() const;                      // all ranks together
  bool is_moe() const;
  std::int32_t num_routed_experts() const;              // the largest group's, 0 if dense
};

// Built-in profiles: llama-3-8b, llama-3-70b, deepseek-v4.1-flash.
std::vector<std::string> list_profiles();
std::optional<ModelProfile> find_profile(std::string_view name);

// The profile with its KV cache stored as FP8 (--kv-cache-dtype fp8): KV
// bytes per token and the attention's KV reads scale by fp8/auto. Fails if the
// profile offers no FP8 KV layout.
Result<ModelProfile> with_fp8_kv_cache(const ModelProfile& profile);

// A dense Llama-family profile (llama, mistral, qwen2, qwen3) from shape numbers.
struct DenseShape {
  std::string name;
  std::int32_t num_layers = 0;
  std::int32_t hidden_size = 0;
  std::int32_t num_attention_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t intermediate_size = 0;
  std::int32_t vocab_size = 0;
  std::int32_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  double dtype_bytes = 2;
};
ModelProfile make_dense_profile(const DenseShape& shape);

// A DeepSeek-V3 profile (MLA + DeepSeekMoE) from shape numbers. The KV cache
// is the latent: (kv_lora_rank + qk_rope_head_dim) values per token per layer,
// one copy shared by every head (and every TP rank). Decode's attention costs
// the absorbed form, a chunk of several rows the decompressed one (as sluice's
// MLA kernels run them); h200_sluice_cuda_deepseek_v3() holds the efficiencies
// its CUDA kernels were measured at.
struct DeepseekV3ProfileShape {
  std::string name;
  std::int32_t num_layers = 0;
  std::int32_t num_dense_layers = 0;  // first_k_dense_replace
  std::int32_t hidden_size = 0;
  std::int32_t num_attention_heads = 0;
  std::int32_t q_lora_rank = 0;       // 0: q_proj straight from the hidden state
  std::int32_t kv_lora_rank = 0;
  std::int32_t qk_nope_head_dim = 0;
  std::int32_t qk_rope_head_dim = 0;
  std::int32_t v_head_dim = 0;
  std::int32_t intermediate_size = 0;      // the dense layers' MLP
  std::int32_t moe_intermediate_size = 0;  // one routed expert; shared experts are n_shared times wider
  std::int32_t num_routed_experts = 0;
  std::int32_t num_experts_per_token = 0;
  std::int32_t num_shared_experts = 0;
  std::int32_t vocab_size = 0;
  std::int32_t max_position_embeddings = 0;
  double linear_weight_bytes = 2;  // per weight of the projections and experts (1 for FP8 checkpoints)
  double dtype_bytes = 2;          // embedding, head, norms, router and the KV cache
};
ModelProfile make_deepseek_v3_profile(const DeepseekV3ProfileShape& shape);

// A DeepSeek-V4 profile from its parsed config.json: every layer MoE (the
// hash-routed ones cost the same), grouped by attention kind (sliding, CSA,
// HCA), and the KV cache of its paged layout (model/deepseek_v4_kv_layout.h)
// with the CUDA kernels' records (fp8_ds_mla entries, FP8 index keys):
// compressed entries and index keys per token, the window ring and the
// compressors' pending projections per sequence. Its FLOPs and bytes come
// from shapes; h200_sluice_cuda_deepseek_v4() holds the efficiencies its
// kernels were measured at (deepseek_v4_kernels is set).
ModelProfile make_deepseek_v4_profile(const std::string& name, const ModelConfig& config);


// Reads DIR/config.json (llama, mistral, qwen2, qwen3, deepseek_v3,
// deepseek_v4; model/config.h) into a profile: dense family in bf16,
// DeepSeek-V3 with its checkpoint's FP8 linear weights at one byte,
// DeepSeek-V4 as make_deepseek_v4_profile builds it.
Result<ModelProfile> profile_from_hf_dir(const std::string& dir);

}  // namespace sluice::sim
