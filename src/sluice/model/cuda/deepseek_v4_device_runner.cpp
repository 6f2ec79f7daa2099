#include "sluice/model/cuda/deepseek_v4_device_runner.h"

#include <cuda_runtime_api.h>

#include <optional>

#include <fmt/format.h>

#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/model/cuda/deepseek_v4_forward.h"
#include "sluice/model/deepseek_v4_model.h"

namespace sluice {
namespace {

class CudaDeepseekV4Runner final : public DeepseekV4DeviceRunner {
 public:
  static Result<std::unique_ptr<DeepseekV4DeviceRunner>> make(const ModelConfig& config,
                                                              const Checkpoint& checkpoint, Ops& ops) {
    auto runner = std::unique_ptr<CudaDeepseekV4Runner>(new CudaDeepseekV4Runner());
    SLUICE_TRY_ASSIGN(options, cuda_ops_options(ops));
    runner->options_ = {.fp8_dense_gemm = options.fp8_dense_gemm, .moe_expert_gemm = options.moe_expert_gemm};
    // FP8 linears and FP4 experts stay as stored until the upload (never dequantized on the host).
    SLUICE_TRY_ASSIGN(reference,
                      DeepseekV4Reference::load(config, checkpoint, runner->kernels_, {.keep_quantized = true}));
    runner->reference_ = std::move(reference);
    return std::unique_ptr<DeepseekV4DeviceRunner>(std::move(runner));
  }

  const DeepseekV4Reference& reference() const override { return *reference_; }
  // The attention reads latents and entries as bf16: stored so, at half the bytes.
  std::optional<DeepseekV4KvFormats> kv_formats(KvCacheDtype dtype) const override {
    return dtype == KvCacheDtype::kFp8 ? DeepseekV4KvFormats::cuda_fp8() : DeepseekV4KvFormats::cuda();
  }

  // Uploads the weights (FP8 / FP4 as stored, see deepseek_v4_forward.h) and then drops the host copy: the
  // reference keeps only its config, so a later layout must have the same
  // block size (the device forward holds the first one).
  Status set_kv_layout(const DeepseekV4KvLayout& layout) override {
    if (device_ != nullptr) {
      if (layout.block_size_tokens() == layout_->block_size_tokens()) return Ok{};
      return Error{fmt::format("deepseek_v4 on CUDA: the KV layout was set for blocks of {} tokens; {} asked later",
                              layout_->block_size_tokens(), layout.block_size_tokens()),
                   ErrorCode::kInvalidArgument};
    }
    layout_ = layout;
    SLUICE_TRY_ASSIGN(device, cuda::DeepseekV4DeviceForward::upload(*reference_, *layout_, options_));
    device_ = std::move(device);
    cuda::DeepseekV4DeviceForward::release_host_weights(*reference_);
    return Ok{};
  }

  Result<Tensor> forward(Ops& ops, const StepLayout& step) const override {
    SLUICE_CHECK(device_ != nullptr);
    SLUICE_TRY_ASSIGN(blocks, cuda_model_defined_kv(ops));
    // CudaOps' own stream may still write the blocks (a host-tier copy): the forward runs after it.
    SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
    Tensor out = ops.scratch({static_cast<std::int64_t>(step.sample_rows.size()), reference_->config().vocab_size},
                             DType::f32);
    // The logits stay on the device for the sampler (the forward synchronises before it returns).
    SLUICE_TRY(device_->forward_into(step, blocks, static_cast<float*>(out.data), nullptr));
    return out;
  }

 private:
  CudaDeepseekV4Runner() = default;
  cpu::DeepseekV4CpuKernels kernels_;  // DeepseekV4Reference::load keeps a pointer; nothing runs them here
  std::unique_ptr<DeepseekV4Reference> reference_;
  cuda::DeepseekV4DeviceOptions options_;
  std::optional<DeepseekV4KvLayout> layout_;
  std::unique_ptr<cuda::DeepseekV4DeviceForward> device_;
};

}  // namespace

void register_cuda_deepseek_v4_runner() { set_deepseek_v4_device_runner_maker(&CudaDeepseekV4Runner::make); }

}  // namespace sluice
