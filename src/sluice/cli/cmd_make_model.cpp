#include <cstdio>

#include "sluice/cli/commands.h"
#include "sluice/model/make_model.h"

namespace sluice::cli {

void add_make_model_command(CLI::App& app) {
  auto options = std::make_shared<MakeModelOptions>();
  auto arch = std::make_shared<std::string>("llama");
  auto dtype = std::make_shared<std::string>("bf16");
  CLI::App* cmd = app.add_subcommand("make-model", "write a random-weight Hugging Face model directory");
  cmd->add_option("--arch", *arch, "llama | mistral | qwen2 | qwen3 | deepseek_v3")
      ->check(CLI::IsMember({"llama", "mistral", "qwen2", "qwen3", "deepseek_v3"}));
  cmd->add_option("--layers", options->num_layers)->check(CLI::PositiveNumber);
  cmd->add_option("--hidden", options->hidden_size)->check(CLI::PositiveNumber);
  cmd->add_option("--heads", options->num_heads)->check(CLI::PositiveNumber);
  cmd->add_option("--kv-heads", options->num_kv_heads)->check(CLI::PositiveNumber);
  cmd->add_option("--intermediate", options->intermediate_size)->check(CLI::PositiveNumber);
  cmd->add_option("--vocab", options->vocab_size)->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", options->head_dim, "default: hidden / heads")->check(CLI::PositiveNumber);
  cmd->add_option("--max-position", options->max_position_embeddings)->check(CLI::PositiveNumber);
  cmd->add_option("--dtype", *dtype, "bf16 | f32 | fp8 (deepseek_v3: float8 e4m3 linear weights, 128x128 block scales)")
      ->check(CLI::IsMember({"bf16", "f32", "fp8"}));
  cmd->add_option("--shards", options->num_shards, "safetensors files (> 1 writes the sharded index)")
      ->check(CLI::PositiveNumber);
  DeepseekV3Shape& ds = options->deepseek_v3;
  const std::string group = "deepseek_v3";
  cmd->add_option("--q-lora-rank", ds.q_lora_rank, "0 = null (q_proj)")->group(group)->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-lora-rank", ds.kv_lora_rank)->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--qk-nope-head-dim", ds.qk_nope_head_dim)->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--qk-rope-head-dim", ds.qk_rope_head_dim)->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--v-head-dim", ds.v_head_dim)->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--experts", ds.n_routed_experts, "routed experts")->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--experts-per-token", ds.num_experts_per_tok)->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--shared-experts", ds.n_shared_experts)->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--moe-intermediate", ds.moe_intermediate_size)->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--dense-layers", ds.first_k_dense_replace, "first_k_dense_replace")
      ->group(group)
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--expert-groups", ds.n_group, "n_group")->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--topk-groups", ds.topk_group, "topk_group")->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--routed-scale", ds.routed_scaling_factor, "routed_scaling_factor")
      ->group(group)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--yarn-factor", ds.yarn_factor, "YaRN over max-position / factor original positions; 0 = none")
      ->group(group)
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--yarn-mscale", ds.yarn_mscale)->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--yarn-mscale-all-dim", ds.yarn_mscale_all_dim)->group(group)->check(CLI::PositiveNumber);
  cmd->add_option("--mtp-layers", ds.mtp_layers, "num_nextn_predict_layers (their tensors are written too)")
      ->group(group)
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", options->seed);
  cmd->add_option("--out", options->out_dir, "output directory")->required();
  cmd->callback([options, arch, dtype] {
    options->architecture = *parse_architecture(*arch);
    options->dtype = *dtype == "bf16" ? DType::bf16 : *dtype == "f32" ? DType::f32 : DType::f8_e4m3;
    if (auto status = make_model(*options); !status) {
      std::fprintf(stderr, "error: %s\n", status.error().message.c_str());
      throw CLI::RuntimeError(1);
    }
    std::printf("wrote %s (random weights, seed %llu)\n", options->out_dir.c_str(),
                static_cast<unsigned long long>(options->seed));
  });
}

}  // namespace sluice::cli
