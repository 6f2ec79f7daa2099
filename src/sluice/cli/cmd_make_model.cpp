#include <cstdio>

#include "sluice/cli/commands.h"
#include "sluice/model/make_model.h"

namespace sluice::cli {

void add_make_model_command(CLI::App& app) {
  auto options = std::make_shared<MakeModelOptions>();
  auto arch = std::make_shared<std::string>("llama");
  auto dtype = std::make_shared<std::string>("bf16");
  CLI::App* cmd = app.add_subcommand("make-model", "write a random-weight Hugging Face model directory");
  cmd->add_option("--arch", *arch, "llama | mistral | qwen2 | qwen3")
      ->check(CLI::IsMember({"llama", "mistral", "qwen2", "qwen3"}));
  cmd->add_option("--layers", options->num_layers)->check(CLI::PositiveNumber);
  cmd->add_option("--hidden", options->hidden_size)->check(CLI::PositiveNumber);
  cmd->add_option("--heads", options->num_heads)->check(CLI::PositiveNumber);
  cmd->add_option("--kv-heads", options->num_kv_heads)->check(CLI::PositiveNumber);
  cmd->add_option("--intermediate", options->intermediate_size)->check(CLI::PositiveNumber);
  cmd->add_option("--vocab", options->vocab_size)->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", options->head_dim, "default: hidden / heads")->check(CLI::PositiveNumber);
  cmd->add_option("--max-position", options->max_position_embeddings)->check(CLI::PositiveNumber);
  cmd->add_option("--dtype", *dtype, "bf16 | f32")->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--seed", options->seed);
  cmd->add_option("--out", options->out_dir, "output directory")->required();
  cmd->callback([options, arch, dtype] {
    options->architecture = *parse_architecture(*arch);
    options->dtype = *dtype == "bf16" ? DType::bf16 : DType::f32;
    if (auto status = make_model(*options); !status) {
      std::fprintf(stderr, "error: %s\n", status.error().message.c_str());
      throw CLI::RuntimeError(1);
    }
    std::printf("wrote %s (random weights, seed %llu)\n", options->out_dir.c_str(),
                static_cast<unsigned long long>(options->seed));
  });
}

}  // namespace sluice::cli
