// DeepSeek-V3 (DeepseekV3ForCausalLM; also R1, V3.1 and others of the same
// layout), written once against Ops:
//   - MLA attention: queries through a low-rank q_a/q_b pair (or q_proj when
//     q_lora_rank is null); keys and values from one compressed latent per
//     token, the only thing cached (kv_lora_rank + qk_rope_head_dim values per
//     token per layer), plus a rope key shared by all heads; YaRN rope with
//     mscale, interleaved rope dims.
//   - DeepSeekMoE from first_k_dense_replace on: sigmoid router with a
//     selection-only correction bias, group-limited top-k, routed experts plus
//     always-on shared experts; dense MLPs before.
//   - FP8 block-scaled checkpoints: kept FP8 where the backend has FP8 GEMMs
//     (CUDA), dequantized on load otherwise (WeightBinder decides; this file
//     only says how each weight is used).
//
// Over a Communicator of N > 1 ranks (vLLM's layout for -tp N, with or
// without --enable-expert-parallel; docs/architecture.md "Several devices"):
//   - MLA heads sharded: this rank's rows of q_b_proj (q_proj) and kv_b_proj,
//     its columns of o_proj, then an all-reduce. q_a_proj and kv_a_proj are
//     replicated, so every rank computes and caches the whole latent (MLA has
//     one latent for all heads: nothing to shard in the cache).
//   - Dense MLPs and the shared experts: column-parallel gate|up,
//     row-parallel down.
//   - Routed experts: expert_parallel, this rank holds the whole experts
//     [rank * E / N, (rank + 1) * E / N); otherwise every expert's width
//     is split like a dense MLP. The router is replicated: every rank holds
//     every token after the attention's all-reduce and routes it alike, so
//     dispatch moves no bytes; each rank adds its experts' share (or its
//     width's share) to the shared experts' partial sum and one all-reduce
//     combines them, the same collective as a dense layer's.
//   - Vocab-parallel embedding and head, as llama.h.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "sluice/dist/communicator.h"
#include "sluice/model/decoder_model.h"

namespace sluice {

class DeepseekV3Model final : public DecoderModel {
 public:
  // `comm`: this rank's communicator, or nullptr for the whole model on one device.
  static Result<std::unique_ptr<DeepseekV3Model>> load(const ModelConfig& config, const Checkpoint& checkpoint,
                                                       Ops& ops, const LoadProgress& progress,
                                                       Communicator* comm = nullptr, bool expert_parallel = false);

  const ModelConfig& config() const override { return config_; }
  KvCacheSpec kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const override;
  Result<Tensor> forward(Ops& ops, const StepLayout& layout) const override;

 private:
  // Shapes below are this rank's share (heads / ranks, widths / ranks).
  struct Attention {
    Tensor q_a_proj;   // [q_lora_rank, hidden]; empty when q_lora_rank is null
    Tensor q_a_norm;   // [q_lora_rank]
    Tensor q_proj;     // [heads * qk_head_dim, q_lora_rank or hidden]: q_b_proj, or q_proj without q_lora
    Tensor kv_a_proj;  // [kv_lora_rank + qk_rope_head_dim, hidden]: latent rows, then the rope key rows
    Tensor kv_a_norm;  // [kv_lora_rank]
    Tensor kv_b_proj;  // [heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
    Tensor o_proj;     // [hidden, heads * v_head_dim]
  };
  struct Moe {
    Tensor router;             // [experts, hidden]
    Tensor correction_bias;    // [experts]
    // This rank's: gate_up [experts * 2 * moe_intermediate, hidden], down
    // [experts * hidden, moe_intermediate] (experts or moe_intermediate / ranks).
    MoeExpertWeights experts;
    Tensor shared_gate_up;     // [2 * shared_intermediate / ranks, hidden]
    Tensor shared_down;        // [hidden, shared_intermediate / ranks]
  };
  struct Layer {
    Tensor input_norm;           // [hidden]
    Attention attention;
    Tensor post_attention_norm;  // [hidden]
    Tensor dense_gate_up;        // [2 * intermediate, hidden] (dense layers)
    Tensor dense_down;           // [hidden, intermediate]
    std::optional<Moe> moe;      // MoE layers
  };

  ModelConfig config_;
  DeepseekV3Config ds_;
  Communicator* comm_ = nullptr;  // nullptr: the whole model here
  std::int64_t dense_intermediate_ = 0, shared_intermediate_ = 0;  // this rank's widths
  TokenId first_token_id_ = 0;   // the first vocabulary row of embed_tokens_ and lm_head_
  RopeParams rope_;
  MlaShape mla_;
  MoeRouting routing_;
  // FP8 weights dequantized to f32, and sharded slices; host weight views point here.
  HostWeightBuffers dequantized_;
  Tensor embed_tokens_;            // [vocab / ranks, hidden]
  std::vector<Layer> layers_;
  Tensor final_norm_;              // [hidden]
  Tensor lm_head_;                 // [vocab / ranks, hidden]
};

}  // namespace sluice
