#include <unistd.h>

#include <cstdio>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/cli/commands.h"
#include "sluice/model/config.h"
#include "sluice/model/generate.h"
#include "sluice/model/model_runner.h"

namespace sluice::cli {
namespace {

struct GenerateArgs {
  std::string model_dir;
  std::string prompt_ids;
  std::int32_t max_tokens = 16;
  SamplingParams sampling;
  std::optional<std::uint64_t> seed;
  bool ignore_eos = false;
  int num_threads = 0;
  std::int32_t block_size_tokens = 16;
  std::int32_t prefill_chunk_tokens = 0;
};

Result<std::vector<TokenId>> parse_ids(const std::string& text) {
  std::vector<TokenId> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      std::size_t used = 0;
      const long value = std::stol(item, &used);
      if (used != item.size() || value < 0 || value > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<TokenId>(value));
    } catch (const std::exception&) {
      return Error{fmt::format("--prompt-ids: '{}' is not a token id", item)};
    }
  }
  if (ids.empty()) return Error{"--prompt-ids is empty"};
  return ids;
}

Status run_generate(const GenerateArgs& args) {
  SLUICE_TRY_ASSIGN(prompt, parse_ids(args.prompt_ids));
  SamplingParams sampling = args.sampling;
  sampling.seed = args.seed ? *args.seed : std::random_device{}();
  SLUICE_TRY(sampling.validate());
  SLUICE_TRY_ASSIGN(config, load_model_config(args.model_dir));
  ModelRunnerOptions runner_options{.block_size_tokens = args.block_size_tokens, .show_progress = isatty(2) != 0};
  const std::int64_t needed_tokens = static_cast<std::int64_t>(prompt.size()) + args.max_tokens;
  runner_options.num_kv_blocks =
      static_cast<std::int32_t>((needed_tokens + args.block_size_tokens - 1) / args.block_size_tokens);
  SLUICE_TRY_ASSIGN(backend, make_model_runner(args.model_dir, make_cpu_ops({.num_threads = args.num_threads}),
                                               runner_options));
  GenerateOptions options{.max_new_tokens = args.max_tokens,
                          .sampling = sampling,
                          .stop_token_ids = args.ignore_eos ? std::vector<TokenId>{} : config.eos_token_ids,
                          .prefill_chunk_tokens = args.prefill_chunk_tokens};
  SLUICE_TRY_ASSIGN(result, generate_sequence(*backend, prompt, options));
  std::string line;
  for (std::size_t i = 0; i < result.tokens.size(); ++i) line += fmt::format("{}{}", i ? "," : "", result.tokens[i]);
  std::printf("%s\n", line.c_str());
  return Ok{};
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "generate tokens from a prompt on the CPU reference backend");
  cmd->add_option("--model", args->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--prompt-ids", args->prompt_ids, "comma-separated token ids")->required();
  cmd->add_option("--max-tokens", args->max_tokens)->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", args->sampling.temperature, "0 = greedy");
  cmd->add_option("--top-k", args->sampling.top_k);
  cmd->add_option("--top-p", args->sampling.top_p);
  cmd->add_option("--min-p", args->sampling.min_p);
  cmd->add_option("--seed", args->seed, "sampling seed (reproducible output)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating after an end-of-sequence token");
  cmd->add_option("--threads", args->num_threads, "CPU threads (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--block-size", args->block_size_tokens, "KV block size in tokens")->check(CLI::PositiveNumber);
  cmd->add_option("--prefill-chunk", args->prefill_chunk_tokens, "prefill at most this many tokens per step")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([args] {
    if (auto status = run_generate(*args); !status) {
      std::fprintf(stderr, "error: %s\n", status.error().message.c_str());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace sluice::cli
