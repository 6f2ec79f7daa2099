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

Status check_tensor_parallel(const ModelConfig& config, std::int32_t num_ranks, bool expert_parallel) {
  const bool deepseek_v3 = config.architecture == Architecture::deepseek_v3;
  if (expert_parallel && num_ranks == 1)
    return Error{"--enable-expert-parallel needs --tensor-parallel-size > 1: experts are split over those ranks",
                 ErrorCode::kInvalidArgument};
  if (expert_parallel && !deepseek_v3 && config.architecture != Architecture::deepseek_v4)
    return Error{fmt::format("--enable-expert-parallel: {} is a dense model, it has no experts",
                             architecture_name(config.architecture)),
                 ErrorCode::kInvalidArgument};
  if (num_ranks == 1) return Ok{};
  if (config.architecture == Architecture::deepseek_v4)
    return Error{fmt::format("--tensor-parallel-size {}: deepseek_v4 runs on one device only (its CPU reference)",
                             num_ranks),
                 ErrorCode::kInvalidArgument};
  std::vector<std::pair<const char*, std::int64_t>> splits = {{"num_attention_heads", config.num_heads},
                                                              {"vocab_size", config.vocab_size}};
  if (!deepseek_v3) {
    splits.push_back({"num_key_value_heads", config.num_kv_heads});
    splits.push_back({"intermediate_size", config.intermediate_size});
  } else {
    const DeepseekV3Config& ds = *config.deepseek_v3;
    if (ds.first_k_dense_replace > 0) splits.push_back({"intermediate_size", config.intermediate_size});
    splits.push_back({"moe_intermediate_size * n_shared_experts",
                      std::int64_t{ds.moe_intermediate_size} * ds.n_shared_experts});
    if (expert_parallel)
      splits.push_back({"n_routed_experts", ds.n_routed_experts});
    else
      splits.push_back({"moe_intermediate_size", ds.moe_intermediate_size});
  }
  for (const auto& [field, value] : splits)
    if (value % num_ranks != 0)
      return Error{fmt::format("--tensor-parallel-size {} must divide the model's {} ({}){}", num_ranks, field, value,
                               expert_parallel ? " (with --enable-expert-parallel)" : ""),
                   ErrorCode::kInvalidArgument};
  return Ok{};
}

Result<std::unique_ptr<DecoderModel>> load_decoder_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                                         Ops& ops, const LoadProgress& progress,
                                                         Communicator* comm, bool expert_parallel) {
  if (config.architecture == Architecture::deepseek_v4) {
    if (comm && comm->size() > 1)
      return Error{"deepseek_v4 runs on one rank only: its tensor and expert parallelism are not built (issue 19)"};
    SLUICE_TRY_ASSIGN(model, DeepseekV4Model::load(config, checkpoint, ops));
    return std::unique_ptr<DecoderModel>(std::move(model));
  }
  SLUICE_TRY(check_tensor_parallel(config, comm ? comm->size() : 1, expert_parallel));
  // The CPU communicator reads activations in host memory.
  if (comm && comm->size() > 1 && ops.activation_dtype() != DType::f32)
    return Error{
        "tensor parallelism runs on the CPU backend only: the NCCL communicator is not wired to CUDA yet (issue 19)"};
  if (config.architecture == Architecture::deepseek_v3) {
    SLUICE_TRY_ASSIGN(model, DeepseekV3Model::load(config, checkpoint, ops, progress, comm, expert_parallel));
    return std::unique_ptr<DecoderModel>(std::move(model));
  }
  SLUICE_TRY_ASSIGN(model, LlamaModel::load(config, checkpoint, ops, progress, comm));
  return std::unique_ptr<DecoderModel>(std::move(model));
}

}  // namespace sluice
