// DeepSeek-V4 served by the engine (issue 18 stage 2): the reference's
// forward pass (deepseek_v4.h) over the engine's paged blocks, every
// sequence of a step in one pass. The blocks follow DeepseekV4KvLayout
// (window latents, compressed entries, index keys and the compressors'
// pending projections; docs/kv-v4.md), in a KvCacheLayout::model_defined
// cache, so the prefix cache and the host tier move a sequence's whole state
// with its blocks. Runs the reference where the Ops offer the host V4 kernels
// and host access to the blocks (the CPU backend); elsewhere a registered
// DeepseekV4DeviceRunner (CUDA: model/cuda/deepseek_v4_device_runner.h,
// docs/deepseek-v4-cuda.md), or refuses.
#pragma once

#include <memory>
#include <optional>

#include "sluice/model/decoder_model.h"
#include "sluice/model/deepseek_v4.h"
#include "sluice/model/deepseek_v4_kv_layout.h"

namespace sluice {

// A backend's own V4 forward over its device blocks, for Ops without host V4
// kernels. The model module cannot depend on a backend, so the backend's
// module registers a maker (set_deepseek_v4_device_runner_maker) that the
// program calls before loading.
class DeepseekV4DeviceRunner {
 public:
  virtual ~DeepseekV4DeviceRunner() = default;
  virtual const DeepseekV4Reference& reference() const = 0;  // the loaded weights and config
  // How the backend's blocks hold latents, entries and index keys (the layout
  // it is given) for --kv-cache-dtype `dtype`; none where it has no such layout.
  virtual std::optional<DeepseekV4KvFormats> kv_formats(KvCacheDtype dtype) const {
    if (dtype == KvCacheDtype::kAuto) return DeepseekV4KvFormats::cpu();
    return std::nullopt;
  }
  virtual Status set_kv_layout(const DeepseekV4KvLayout& layout) = 0;
  // Logits [step.sample_rows.size(), vocab] f32 in a scratch tensor of `ops`.
  virtual Result<Tensor> forward(Ops& ops, const StepLayout& step) const = 0;
};
using DeepseekV4DeviceRunnerMaker = Result<std::unique_ptr<DeepseekV4DeviceRunner>> (*)(const ModelConfig& config,
                                                                                      const Checkpoint& checkpoint,
                                                                                      Ops& ops);
void set_deepseek_v4_device_runner_maker(DeepseekV4DeviceRunnerMaker maker);

class DeepseekV4Model final : public DecoderModel {
 public:
  static Result<std::unique_ptr<DeepseekV4Model>> load(const ModelConfig& config, const Checkpoint& checkpoint,
                                                       Ops& ops);

  const ModelConfig& config() const override {
    return device_ ? device_->reference().config() : reference_->config();
  }
  Status set_kv_cache_dtype(KvCacheDtype dtype) override;
  Status set_kv_block_size(std::int32_t block_size_tokens) override;
  KvCacheSpec kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const override;
  Result<Tensor> forward(Ops& ops, const StepLayout& layout) const override;

 private:
  std::unique_ptr<DeepseekV4Reference> reference_;  // the host forward, where the Ops have V4 kernels
  std::unique_ptr<DeepseekV4DeviceRunner> device_;   // else the backend's
  std::optional<DeepseekV4KvLayout> kv_layout_;  // set by set_kv_block_size
  std::optional<DeepseekV4KvFormats> kv_formats_;  // set_kv_cache_dtype's; unset: the backend's for auto
};

}  // namespace sluice
