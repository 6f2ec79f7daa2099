// The dense Llama family (llama, mistral, qwen2, qwen3), written once against
// Ops. Differences between members are flags on ModelConfig: qkv bias (qwen2),
// per-head q/k RMSNorm (qwen3), Llama 3 rope scaling, tied embeddings.
//
// Tensor parallel (a Communicator of size > 1): this rank holds its share of
// the heads (q, and KV heads: the size must divide num_key_value_heads), of
// the MLP and of the vocabulary, sliced at load from the unsharded
// checkpoint. Column-parallel q|k|v and gate|up; row-parallel o_proj and
// down_proj, each followed by an all-reduce; vocab-parallel embedding (each
// rank looks up its rows, zeros elsewhere, all-reduced) and head (each rank's
// logits columns, all-gathered). Every rank returns the whole logits.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "sluice/dist/communicator.h"
#include "sluice/model/decoder_model.h"

namespace sluice {

class LlamaModel final : public DecoderModel {
 public:
  // `comm`: this rank's communicator, or nullptr for the whole model on one device.
  static Result<std::unique_ptr<LlamaModel>> load(const ModelConfig& config, const Checkpoint& checkpoint, Ops& ops,
                                                  const LoadProgress& progress, Communicator* comm);

  const ModelConfig& config() const override { return config_; }
  KvCacheSpec kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const override;
  Result<Tensor> forward(Ops& ops, const StepLayout& layout) const override;

 private:
  struct Layer {
    Tensor input_norm;       // [hidden]
    // Sizes below are this rank's: q_size = its heads * head_dim, and so on.
    Tensor qkv_proj;         // [q_size + 2 * kv_size, hidden]: q rows, then k, then v
    std::array<Tensor, 3> qkv_bias;  // [q_size], [kv_size], [kv_size] (qwen2), else empty
    Tensor q_norm, k_norm;   // [head_dim] (qwen3), else empty
    Tensor o_proj;           // [hidden, q_size]
    Tensor post_attention_norm;  // [hidden]
    Tensor gate_up_proj;     // [2 * intermediate, hidden]: gate rows then up rows
    Tensor down_proj;        // [hidden, intermediate]
  };

  ModelConfig config_;
  Communicator* comm_ = nullptr;  // nullptr: not tensor parallel
  // This rank's share (all of it without a group).
  std::int32_t num_heads_ = 0, num_kv_heads_ = 0;
  std::int64_t intermediate_size_ = 0;
  TokenId first_token_id_ = 0;  // the first vocabulary row of embed_tokens_ and lm_head_
  HostWeightBuffers host_buffers_;  // the column-sliced weights the Tensors below view
  RopeParams rope_;
  Tensor embed_tokens_;  // [vocab / ranks, hidden]
  std::vector<Layer> layers_;
  Tensor final_norm_;    // [hidden]
  Tensor lm_head_;       // [vocab / ranks, hidden]; the embedding when tied
};

}  // namespace sluice
