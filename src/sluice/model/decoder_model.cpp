#include "sluice/model/decoder_model.h"

#include <fmt/format.h>

#include "sluice/model/deepseek_v3.h"
#include "sluice/model/deepseek_v4_model.h"
#include "sluice/model/llama.h"

namespace sluice {

Tensor final_logits(Ops& ops, const StepLayout& layout, const FinalLogitsInputs& in) {
  ops.add_rms_norm(in.residual, in.block_out, in.final_norm, in.eps, in.normed);
  const std::int64_t vocab = in.lm_head.rows();
  const auto num_samples = static_cast<std::int64_t>(layout.sample_rows.size());
  if (num_samples == 0) return Tensor{nullptr, ops.activation_dtype(), Shape{0, vocab}};
  Tensor selected = ops.scratch({num_samples, in.normed.cols()});
  ops.gather_sample_rows(in.normed, selected);
  Tensor logits = ops.scratch({num_samples, vocab});
  ops.matmul(selected, in.lm_head, Tensor{}, logits);
  return logits;
}

Status check_tensor_parallel(const ModelConfig& config, std::int32_t num_ranks) {
  if (num_ranks == 1) return Ok{};
  if (config.architecture == Architecture::deepseek_v3 || config.architecture == Architecture::deepseek_v4)
    return Error{fmt::format("--tensor-parallel-size {}: tensor parallelism covers the dense Llama family only; {} "
                             "waits for expert parallelism (issue 19)",
                             num_ranks, architecture_name(config.architecture)),
                 ErrorCode::kInvalidArgument};
  const std::pair<const char*, std::int64_t> splits[] = {{"num_attention_heads", config.num_heads},
                                                         {"num_key_value_heads", config.num_kv_heads},
                                                         {"intermediate_size", config.intermediate_size},
                                                         {"vocab_size", config.vocab_size}};
  for (const auto& [field, value] : splits)
    if (value % num_ranks != 0)
      return Error{fmt::format("--tensor-parallel-size {} must divide the model's {} ({})", num_ranks, field, value),
                   ErrorCode::kInvalidArgument};
  return Ok{};
}

Result<std::unique_ptr<DecoderModel>> load_decoder_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                                         Ops& ops, const LoadProgress& progress,
                                                         Communicator* comm) {
  if (comm) SLUICE_TRY(check_tensor_parallel(config, comm->size()));
  if (config.architecture == Architecture::deepseek_v4) {
    SLUICE_TRY_ASSIGN(model, DeepseekV4Model::load(config, checkpoint, ops));
    return std::unique_ptr<DecoderModel>(std::move(model));
  }
  if (config.architecture == Architecture::deepseek_v3) {
    SLUICE_TRY_ASSIGN(model, DeepseekV3Model::load(config, checkpoint, ops, progress));
    return std::unique_ptr<DecoderModel>(std::move(model));
  }
  SLUICE_TRY_ASSIGN(model, LlamaModel::load(config, checkpoint, ops, progress, comm));
  return std::unique_ptr<DecoderModel>(std::move(model));
}

}  // namespace sluice
