#include <unistd.h>

#include <cstdio>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "sluice/api/chat_template.h"
#include "sluice/api/deepseek_v4_chat.h"
#include "sluice/backend/cpu/cpu_ops.h"
#if SLUICE_HAVE_CUDA
#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/model/cuda/deepseek_v4_device_runner.h"
#endif
#include "sluice/common/io.h"
#include "sluice/cli/commands.h"
#include "sluice/cli/cpu_ranks.h"
#include "sluice/cli/cuda_flags.h"
#include "sluice/model/config.h"
#include "sluice/model/deepseek_v4_kv_layout.h"
#include "sluice/model/generate.h"
#include "sluice/model/model_runner.h"
#include "sluice/tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

struct GenerateArgs {
  std::string model_dir;
  std::string prompt_ids;
  std::string prompt_text;
  std::string chat_file;
  std::int32_t max_tokens = 16;
  SamplingParams sampling;
  std::optional<std::uint64_t> seed;
  bool ignore_eos = false;
  int num_threads = 0;
  std::int32_t tensor_parallel_size = 1;  // cpu only: ranks as threads
  bool enable_expert_parallel = false;    // cpu only: routed experts whole over the ranks
  std::string device = "cpu";
  std::optional<std::int32_t> block_size_tokens;  // unset: 16, or DeepSeek-V4's default
  std::string kv_cache_dtype = "auto";            // as serve's: fp8 names the one FP8 layout
  std::int32_t prefill_chunk_tokens = 0;
  CudaFlags cuda;
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

// --chat FILE: a JSON list of messages, or {"messages": [...], "tools": [...],
// "chat_template_kwargs": {...}}, rendered with the model's chat template (a
// DeepSeek-V4 model without one: sluice's encoding of DeepSeek's, as serve does).
Result<std::string> render_chat(const std::string& path, const Tokenizer& tokenizer, bool deepseek_v4) {
  SLUICE_TRY_ASSIGN(text, read_file(path));
  auto conversation = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (conversation.is_discarded()) return Error{fmt::format("{}: not valid JSON", path)};
  api::ChatRenderOptions options{.bos_token = tokenizer.bos_token(), .eos_token = tokenizer.eos_token()};
  nlohmann::ordered_json messages = conversation;
  if (conversation.is_object()) {
    messages = conversation.value("messages", nlohmann::ordered_json());
    if (conversation.contains("tools")) options.tools = conversation["tools"];
    if (conversation.contains("chat_template_kwargs")) options.extra_kwargs = conversation["chat_template_kwargs"];
  }
  if (!messages.is_array()) return Error{fmt::format("{}: expected a list of messages or {{\"messages\": [...]}}", path)};
  if (tokenizer.chat_template().empty()) {
    if (deepseek_v4) return api::render_deepseek_v4_chat(messages, options);
    return Error{"the model's tokenizer_config.json has no chat_template"};
  }
  SLUICE_TRY_ASSIGN(chat_template, api::ChatTemplate::parse(tokenizer.chat_template()));
  return chat_template.render(messages, options);
}

// The prompt from whichever of --prompt-ids, --prompt, --chat was given.
Result<std::vector<TokenId>> prompt_tokens(const GenerateArgs& args, const std::optional<Tokenizer>& tokenizer,
                                           const ModelConfig& config) {
  if (!args.prompt_ids.empty()) return parse_ids(args.prompt_ids);
  if (!args.prompt_text.empty()) return tokenizer->encode(args.prompt_text, /*add_special_tokens=*/true);
  SLUICE_TRY_ASSIGN(rendered, render_chat(args.chat_file, *tokenizer, config.deepseek_v4 != nullptr));
  // The template writes BOS itself.
  return tokenizer->encode(rendered, /*add_special_tokens=*/false);
}

// One Ops per tensor-parallel rank.
Result<std::vector<std::unique_ptr<Ops>>> make_ops(const GenerateArgs& args) {
  if (args.device == "cuda") {
    if (args.tensor_parallel_size != 1)
      return Error{"--tensor-parallel-size > 1 runs on --device cpu only until the NCCL communicator is wired to CUDA"};
#if SLUICE_HAVE_CUDA
    const CudaOptions options = cuda_options(args.cuda);
    std::fprintf(stderr, "cuda: %s\n", describe(options).c_str());
    SLUICE_TRY_ASSIGN(ops, make_cuda_ops(options));
    register_cuda_deepseek_v4_runner();  // deepseek_v4 models run model/cuda/deepseek_v4_forward.h
    std::vector<std::unique_ptr<Ops>> one;
    one.push_back(std::move(ops));
    return one;
#else
    return Error{"--device cuda: this build has no CUDA backend (configure with -DSLUICE_CUDA=ON)"};
#endif
  }
  return cpu_ops_per_rank(args.num_threads, args.tensor_parallel_size);
}

Status run_generate(const GenerateArgs& args, const CLI::App& cmd) {
  SLUICE_TRY(check_cuda_flags(cmd, args.device));
  const int num_prompt_sources = !args.prompt_ids.empty() + !args.prompt_text.empty() + !args.chat_file.empty();
  if (num_prompt_sources != 1) return Error{"give exactly one of --prompt-ids, --prompt, --chat"};
  std::optional<Tokenizer> tokenizer;
  if (args.prompt_ids.empty()) {
    SLUICE_TRY_ASSIGN(loaded, Tokenizer::load(args.model_dir));
    tokenizer = std::move(loaded);
  }
  SLUICE_TRY_ASSIGN(config, load_model_config(args.model_dir));
  SLUICE_TRY_ASSIGN(prompt, prompt_tokens(args, tokenizer, config));
  if (prompt.empty()) return Error{"the prompt encodes to no tokens"};
  SamplingParams sampling = args.sampling;
  sampling.seed = args.seed ? *args.seed : std::random_device{}();
  SLUICE_TRY(sampling.validate());
  const std::int32_t block_size = args.block_size_tokens.value_or(
      config.deepseek_v4 != nullptr ? deepseek_v4_default_block_size(config) : 16);
  ModelRunnerOptions runner_options{
      .block_size_tokens = block_size,
      .show_progress = isatty(2) != 0,
      .enable_expert_parallel = args.enable_expert_parallel,
      .kv_cache_dtype = args.kv_cache_dtype == "auto" ? KvCacheDtype::kAuto : KvCacheDtype::kFp8};
  const std::int64_t needed_tokens = static_cast<std::int64_t>(prompt.size()) + args.max_tokens;
  runner_options.num_kv_blocks = static_cast<std::int32_t>((needed_tokens + block_size - 1) / block_size);
  SLUICE_TRY_ASSIGN(ops, make_ops(args));
  SLUICE_TRY_ASSIGN(backend, make_tensor_parallel_model_runner(args.model_dir, std::move(ops), runner_options));
  GenerateOptions options{.max_new_tokens = args.max_tokens,
                          .sampling = sampling,
                          .stop_token_ids = args.ignore_eos ? std::vector<TokenId>{} : config.eos_token_ids,
                          .prefill_chunk_tokens = args.prefill_chunk_tokens};
  SLUICE_TRY_ASSIGN(result, generate_sequence(*backend, prompt, options));
  if (tokenizer) {  // text in, text out
    std::printf("%s\n", tokenizer->decode(result.tokens, /*skip_special_tokens=*/true).c_str());
    return Ok{};
  }
  std::string line;
  for (std::size_t i = 0; i < result.tokens.size(); ++i) line += fmt::format("{}{}", i ? "," : "", result.tokens[i]);
  std::printf("%s\n", line.c_str());
  return Ok{};
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "generate from token ids, text or a conversation (CPU reference or CUDA backend)");
  cmd->add_option("--model", args->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--prompt-ids", args->prompt_ids, "comma-separated token ids (prints ids)");
  cmd->add_option("--prompt", args->prompt_text, "prompt text, tokenized with the model's tokenizer (prints text)");
  cmd->add_option("--chat", args->chat_file,
                  "conversation JSON file rendered with the model's chat template (prints text)");
  cmd->add_option("--max-tokens", args->max_tokens)->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", args->sampling.temperature, "0 = greedy");
  cmd->add_option("--top-k", args->sampling.top_k);
  cmd->add_option("--top-p", args->sampling.top_p);
  cmd->add_option("--min-p", args->sampling.min_p);
  cmd->add_option("--seed", args->seed, "sampling seed (reproducible output)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating after an end-of-sequence token");
  cmd->add_option("--threads", args->num_threads, "CPU threads (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--tensor-parallel-size", args->tensor_parallel_size,
                  "cpu: split the model over this many ranks, one thread each")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--enable-expert-parallel", args->enable_expert_parallel,
                "cpu: MoE routed experts split whole over the --tensor-parallel-size ranks");
  cmd->add_option("--device", args->device, "cpu (the reference) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--block-size", args->block_size_tokens,
                  "KV block size in tokens (default 16; DeepSeek-V4: 1024, whole compression windows)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype,
                  "auto | fp8 | fp8_e4m3 | fp8_ds_mla: DeepSeek-V4 on --device cuda stores fp8_ds_mla latent records "
                  "(the model refuses it elsewhere)")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3", "fp8_ds_mla"}));
  cmd->add_option("--prefill-chunk", args->prefill_chunk_tokens, "prefill at most this many tokens per step")
      ->check(CLI::NonNegativeNumber);
  add_cuda_flags(*cmd, args->cuda);
  cmd->callback([args, cmd] {
    if (auto status = run_generate(*args, *cmd); !status) {
      std::fprintf(stderr, "error: %s\n", status.error().message.c_str());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace sluice::cli
