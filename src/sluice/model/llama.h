// The dense Llama family (llama, mistral, qwen2, qwen3), written once against
// Ops. Differences between members are flags on ModelConfig: qkv bias (qwen2),
// per-head q/k RMSNorm (qwen3), Llama 3 rope scaling, tied embeddings.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "sluice/model/decoder_model.h"

namespace sluice {

class LlamaModel final : public DecoderModel {
 public:
  static Result<std::unique_ptr<LlamaModel>> load(const ModelConfig& config, const Checkpoint& checkpoint, Ops& ops,
                                                  const LoadProgress& progress);

  const ModelConfig& config() const override { return config_; }
  KvCacheSpec kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const override;
  Result<Tensor> forward(Ops& ops, const StepLayout& layout) const override;

 private:
  struct Layer {
    Tensor input_norm;       // [hidden]
    Tensor qkv_proj;         // [q_size + 2 * kv_size, hidden]: q rows, then k, then v
    std::array<Tensor, 3> qkv_bias;  // [q_size], [kv_size], [kv_size] (qwen2), else empty
    Tensor q_norm, k_norm;   // [head_dim] (qwen3), else empty
    Tensor o_proj;           // [hidden, q_size]
    Tensor post_attention_norm;  // [hidden]
    Tensor gate_up_proj;     // [2 * intermediate, hidden]: gate rows then up rows
    Tensor down_proj;        // [hidden, intermediate]
  };

  ModelConfig config_;
  RopeParams rope_;
  Tensor embed_tokens_;  // [vocab, hidden]
  std::vector<Layer> layers_;
  Tensor final_norm_;    // [hidden]
  Tensor lm_head_;       // [vocab, hidden]; the embedding when tied
};

}  // namespace sluice
