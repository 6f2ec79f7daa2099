#include "sluice/model/deepseek_v4_model.h"

#include <algorithm>
#include <vector>

#include "sluice/model/deepseek_v4_paged_state.h"

namespace sluice {

namespace {
DeepseekV4DeviceRunnerMaker g_device_runner_maker = nullptr;
}  // namespace

void set_deepseek_v4_device_runner_maker(DeepseekV4DeviceRunnerMaker maker) { g_device_runner_maker = maker; }

Result<std::unique_ptr<DeepseekV4Model>> DeepseekV4Model::load(const ModelConfig& config, const Checkpoint& checkpoint,
                                                               Ops& ops) {
  auto model = std::unique_ptr<DeepseekV4Model>(new DeepseekV4Model());
  const DeepseekV4Kernels* kernels = ops.deepseek_v4_kernels();
  if (kernels != nullptr) {
    SLUICE_TRY_ASSIGN(reference, DeepseekV4Reference::load(config, checkpoint, *kernels));
    model->reference_ = std::move(reference);
    return model;
  }
  if (g_device_runner_maker == nullptr)
    return Error{"deepseek_v4: this backend has no V4 forward (the CPU backend runs the reference; CUDA runs "
                 "model/cuda/deepseek_v4_forward.h once the program registers it)",
                 ErrorCode::kInvalidArgument};
  SLUICE_TRY_ASSIGN(device, g_device_runner_maker(config, checkpoint, ops));
  model->device_ = std::move(device);
  return model;
}

Status DeepseekV4Model::set_kv_cache_dtype(KvCacheDtype dtype) {
  if (!device_) {
    if (dtype == KvCacheDtype::kAuto) return Ok{};
    return Error{"--kv-cache-dtype fp8: deepseek_v4 on the CPU backend runs the reference, which keeps its KV cache "
                 "in f32; --device cuda stores fp8_ds_mla records",
                 ErrorCode::kInvalidArgument};
  }
  const std::optional<DeepseekV4KvFormats> formats = device_->kv_formats(dtype);
  if (!formats)
    return Error{"--kv-cache-dtype fp8: this backend's deepseek_v4 forward has no FP8 KV layout",
                 ErrorCode::kInvalidArgument};
  kv_formats_ = *formats;
  return Ok{};
}

Status DeepseekV4Model::set_kv_block_size(std::int32_t block_size_tokens) {
  DeepseekV4KvFormats formats = DeepseekV4KvFormats::cpu();
  if (kv_formats_) formats = *kv_formats_;
  else if (device_) formats = device_->kv_formats(KvCacheDtype::kAuto).value_or(formats);
  SLUICE_TRY_ASSIGN(layout, DeepseekV4KvLayout::make(config(), block_size_tokens, formats));
  kv_layout_ = std::move(layout);
  if (device_) return device_->set_kv_layout(*kv_layout_);
  return Ok{};
}

KvCacheSpec DeepseekV4Model::kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const {
  SLUICE_CHECK(kv_layout_.has_value());
  SLUICE_CHECK_EQ(kv_layout_->block_size_tokens(), block_size_tokens);
  // The block's floats as one model-defined area, rounded up to whole slots.
  const std::int64_t floats_per_slot = (kv_layout_->floats_per_block() + block_size_tokens - 1) / block_size_tokens;
  return KvCacheSpec{.num_layers = 1,
                     .num_blocks = num_blocks,
                     .block_size_tokens = block_size_tokens,
                     .num_kv_heads = 1,
                     .head_dim = static_cast<std::int32_t>(floats_per_slot),
                     .layout = KvCacheLayout::model_defined};
}

Result<Tensor> DeepseekV4Model::forward(Ops& ops, const StepLayout& layout) const {
  SLUICE_CHECK(kv_layout_.has_value());
  if (device_) return device_->forward(ops, layout);
  std::vector<DeepseekV4PagedState> states;
  states.reserve(layout.sequences.size());  // the steps point into it
  std::vector<DeepseekV4Reference::StepSequence> steps;
  std::int32_t next_row = 0;
  for (const SequenceLayout& seq : layout.sequences) {
    SLUICE_CHECK_EQ(seq.row_begin, next_row);  // rows in sequence order, as forward() numbers them
    next_row += seq.num_rows;
    states.emplace_back(*kv_layout_, ops, seq.block_table);
    steps.push_back({.state = &states.back(),
                     .first_position = seq.num_computed_tokens,
                     .tokens = std::span(layout.token_ids).subspan(seq.row_begin, seq.num_rows)});
  }
  const std::vector<std::int64_t> sample_rows(layout.sample_rows.begin(), layout.sample_rows.end());
  SLUICE_TRY_ASSIGN(logits, reference_->forward(steps, sample_rows));
  const std::int64_t vocab = config().vocab_size;
  Tensor out = ops.scratch({static_cast<std::int64_t>(sample_rows.size()), vocab}, DType::f32);
  std::ranges::copy(logits, out.as<float>());
  return out;
}

}  // namespace sluice
