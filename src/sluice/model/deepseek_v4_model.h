// DeepSeek-V4 served by the engine (issue 18 stage 2): the reference's
// forward pass (deepseek_v4.h) over the engine's paged blocks, every
// sequence of a step in one pass. The blocks follow DeepseekV4KvLayout
// (window latents, compressed entries, index keys and the compressors'
// pending projections; docs/kv-v4.md), in a KvCacheLayout::model_defined
// cache, so the prefix cache and the host tier move a sequence's whole state
// with its blocks. Runs where the Ops offer the V4 kernels and host access to
// the blocks: the CPU backend; CUDA refuses it until its V4 forward exists
// (stage 3 built the CUDA kernels alone: docs/deepseek-v4-cuda.md).
#pragma once

#include <memory>
#include <optional>

#include "sluice/model/decoder_model.h"
#include "sluice/model/deepseek_v4.h"
#include "sluice/model/deepseek_v4_kv_layout.h"

namespace sluice {

class DeepseekV4Model final : public DecoderModel {
 public:
  static Result<std::unique_ptr<DeepseekV4Model>> load(const ModelConfig& config, const Checkpoint& checkpoint,
                                                       Ops& ops);

  const ModelConfig& config() const override { return reference_->config(); }
  Status set_kv_block_size(std::int32_t block_size_tokens) override;
  KvCacheSpec kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const override;
  Result<Tensor> forward(Ops& ops, const StepLayout& layout) const override;

 private:
  std::unique_ptr<DeepseekV4Reference> reference_;
  std::optional<DeepseekV4KvLayout> kv_layout_;  // set by set_kv_block_size
};

}  // namespace sluice
