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
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "sluice/model/decoder_model.h"

namespace sluice {

class DeepseekV3Model final : public DecoderModel {
 public:
  static Result<std::unique_ptr<DeepseekV3Model>> load(const ModelConfig& config, const Checkpoint& checkpoint,
                                                       Ops& ops, const LoadProgress& progress);

  const ModelConfig& config() const override { return config_; }
  KvCacheSpec kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const override;
  Result<Tensor> forward(Ops& ops, const StepLayout& layout) const override;

 private:
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
    MoeExpertWeights experts;  // gate_up [experts * 2 * moe_intermediate, hidden], down [experts * hidden, moe_intermediate]
    Tensor shared_gate_up;     // [2 * shared_intermediate, hidden]
    Tensor shared_down;        // [hidden, shared_intermediate]
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
  RopeParams rope_;
  MlaShape mla_;
  MoeRouting routing_;
  HostWeightBuffers dequantized_;  // FP8 weights dequantized to f32; host weight views point here
  Tensor embed_tokens_;            // [vocab, hidden]
  std::vector<Layer> layers_;
  Tensor final_norm_;              // [hidden]
  Tensor lm_head_;                 // [vocab, hidden]
};

}  // namespace sluice
