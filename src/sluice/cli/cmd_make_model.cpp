#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "sluice/cli/commands.h"
#include "sluice/model/make_model.h"

namespace sluice::cli {
namespace {

// The deepseek_v4 shape's own flags; those it shares with deepseek_v3 (ranks,
// experts, yarn) are read by take_shared_deepseek_flags.
void add_deepseek_v4_options(CLI::App& cmd, MakeModelOptions& options, std::string& layer_types) {
  DeepseekV4Shape& v4 = options.deepseek_v4;
  const std::string group = "deepseek_v4 (also: --q-lora-rank --qk-rope-head-dim --experts --experts-per-token "
                            "--moe-intermediate --routed-scale --yarn-factor --mtp-layers --head-dim)";
  cmd.add_option("--o-groups", v4.o_groups, "head groups of the grouped output projection")->group(group)
      ->check(CLI::PositiveNumber);
  cmd.add_option("--o-lora-rank", v4.o_lora_rank)->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--layer-types", layer_types,
                 "one letter per layer, repeated: s sliding, c CSA, h HCA (default sch)")
      ->group(group);
  cmd.add_option("--csa-rate", v4.csa_compress_rate, "tokens per CSA entry")->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--hca-rate", v4.hca_compress_rate, "tokens per HCA entry")->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--sliding-window", v4.sliding_window)->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--index-heads", v4.index_n_heads)->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--index-head-dim", v4.index_head_dim)->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--index-topk", v4.index_topk)->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--hc-mult", v4.hc_mult, "hyper-connection streams")->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--sinkhorn-iters", v4.hc_sinkhorn_iters)->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--hash-layers", v4.num_hash_layers, "leading hash-routed MoE layers")->group(group)
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--swiglu-limit", v4.swiglu_limit)->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--rope-theta", v4.rope_theta, "sliding layers' rope")->group(group)->check(CLI::PositiveNumber);
  cmd.add_option("--compress-rope-theta", v4.compress_rope_theta)->group(group)->check(CLI::PositiveNumber);
}

// Flags both DeepSeek shapes have bind to deepseek_v3's fields; for V4, the ones given move over.
void take_shared_deepseek_flags(const CLI::App& cmd, MakeModelOptions& options) {
  const DeepseekV3Shape& v3 = options.deepseek_v3;
  DeepseekV4Shape& v4 = options.deepseek_v4;
  auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  if (given("--q-lora-rank")) v4.q_lora_rank = v3.q_lora_rank;
  if (given("--qk-rope-head-dim")) v4.qk_rope_head_dim = v3.qk_rope_head_dim;
  if (given("--experts")) v4.n_routed_experts = v3.n_routed_experts;
  if (given("--experts-per-token")) v4.num_experts_per_tok = v3.num_experts_per_tok;
  if (given("--moe-intermediate")) v4.moe_intermediate_size = v3.moe_intermediate_size;
  if (given("--routed-scale")) v4.routed_scaling_factor = v3.routed_scaling_factor;
  if (given("--yarn-factor")) v4.yarn_factor = v3.yarn_factor;
  if (given("--mtp-layers")) v4.mtp_layers = v3.mtp_layers;
}

}  // namespace

void add_make_model_command(CLI::App& app) {
  auto options = std::make_shared<MakeModelOptions>();
  auto arch = std::make_shared<std::string>("llama");
  auto dtype = std::make_shared<std::string>("bf16");
  CLI::App* cmd = app.add_subcommand("make-model", "write a random-weight Hugging Face model directory");
  cmd->add_option("--arch", *arch, "llama | mistral | qwen2 | qwen3 | deepseek_v3 | deepseek_v4")
      ->check(CLI::IsMember({"llama", "mistral", "qwen2", "qwen3", "deepseek_v3", "deepseek_v4"}));
  cmd->add_option("--layers", options->num_layers)->check(CLI::PositiveNumber);
  cmd->add_option("--hidden", options->hidden_size)->check(CLI::PositiveNumber);
  cmd->add_option("--heads", options->num_heads)->check(CLI::PositiveNumber);
  cmd->add_option("--kv-heads", options->num_kv_heads)->check(CLI::PositiveNumber);
  cmd->add_option("--intermediate", options->intermediate_size)->check(CLI::PositiveNumber);
  cmd->add_option("--vocab", options->vocab_size)->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", options->head_dim, "default: hidden / heads")->check(CLI::PositiveNumber);
  cmd->add_option("--max-position", options->max_position_embeddings)->check(CLI::PositiveNumber);
  cmd->add_option("--dtype", *dtype,
                  "bf16 | f32 | fp8 (deepseek_v3: float8 e4m3 linear weights, 128x128 block scales; deepseek_v4: "
                  "the same with ue8m0 scales, and FP4 routed experts)")
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
  auto layer_types = std::make_shared<std::string>();
  add_deepseek_v4_options(*cmd, *options, *layer_types);
  cmd->add_option("--seed", options->seed);
  cmd->add_option("--out", options->out_dir, "output directory")->required();
  cmd->callback([cmd, options, arch, dtype, layer_types] {
    options->architecture = *parse_architecture(*arch);
    if (layer_types->size() >= options->deepseek_v4.layer_types.size()) {
      std::fprintf(stderr, "error: --layer-types takes at most %zu letters\n", options->deepseek_v4.layer_types.size() - 1);
      throw CLI::RuntimeError(1);
    }
    std::copy(layer_types->begin(), layer_types->end(), options->deepseek_v4.layer_types.begin());
    if (options->architecture == Architecture::deepseek_v4) take_shared_deepseek_flags(*cmd, *options);
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
