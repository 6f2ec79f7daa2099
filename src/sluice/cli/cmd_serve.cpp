// `sluice serve`: the OpenAI-compatible server on the CPU, CUDA or sim backend
// (serve_backend.h says what each --device runs). Flags use
// vLLM's names where the meaning is the same; a flag that would have no effect
// here is refused at start, and every flag's value is logged.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "sluice/api/deepseek_v4_chat.h"
#include "sluice/cli/commands.h"
#include "sluice/cli/cuda_flags.h"
#include "sluice/cli/serve_backend.h"
#include "sluice/cli/vllm_flags.h"
#include "sluice/common/io.h"
#include "sluice/engine/decode_lane_warmup.h"
#include "sluice/engine/prefill_warmup.h"
#include "sluice/engine/engine.h"
#include "sluice/engine/request_validation.h"
#include "sluice/model/config.h"
#include "sluice/model/decoder_model.h"
#include "sluice/model/deepseek_v4_kv_layout.h"
#include "sluice/server/generation_defaults.h"
#include "sluice/server/parser_names.h"
#include "sluice/server/server.h"
#include "sluice/structured/json_constraint.h"

namespace sluice::cli {
namespace {

struct ServeArgs {
  std::string model_dir;  // empty = the built-in default model beside the binary
  std::string model_positional;  // `sluice serve MODEL`, as vLLM takes it
  std::string max_model_len = "auto";
  std::string tokenizer_dir;       // empty = the model directory
  std::string chat_template_path;  // empty = the tokenizer's chat template
  std::string default_chat_template_kwargs;  // a JSON object, or empty
  std::string tool_call_parser;  // vLLM's name; empty = the reasoning parser's format
  bool enable_auto_tool_choice = false;
  bool enable_prompt_tokens_details = true;
  std::optional<std::int64_t> seed;     // the seed of requests that send none
  std::string dtype = "auto";           // vLLM's --dtype, checked against --device
  std::string generation_config = "auto";  // auto | vllm | a directory with generation_config.json
  bool disable_log_stats = false;
  bool check_only = false;
  std::vector<std::string> served_model_names;
  server::ServerConfig server;
  std::string scheduling_policy = "sluice";
  std::string decode_lane = "auto";
  bool step_time_flags_given = false;  // --max-step-ms, --min-prefill-share or --max-token-gap-ms given
  std::optional<double> decode_lane_interval_ms;  // unset: kDefaultDecodeLaneIntervalMs with a decode lane
  std::string eviction_policy = "slru";
  double kv_offloading_size_gib = 0.0;         // vLLM's --kv-offloading-size (GiB)
  std::string kv_offloading_backend = "native";  // vLLM's; only its native (CPU memory) tier exists here
  std::string kv_offloading_eviction = "lru";    // the host tier's order (sluice's own flag)
  std::string kv_cache_dtype = "auto";           // vLLM's; fp8, fp8_e4m3 and fp8_ds_mla name the one FP8 layout
  EngineConfig engine;
  std::optional<std::int32_t> block_size_tokens;  // unset: block_size_tokens() picks it
  std::string device = "cpu";
  std::optional<std::int64_t> kv_cache_memory_bytes;  // cpu: 1 GiB; sim: the memory plan's
  int num_threads = 0;
  std::string sim_profile;
  double sim_speed = 1.0;
  std::int32_t sim_eos_every = 0;
  double shutdown_timeout_s = 30.0;
  double keepalive_interval_s = 10.0;
  double stats_log_interval_s = 5.0;
  std::string reasoning_parser = "auto";
  std::int32_t tensor_parallel_size = 1;
  bool enable_expert_parallel = false;
  std::optional<double> gpu_memory_utilization;
  CudaFlags cuda;
  std::string log_level = "info";
};

std::string default_model_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "default-model";
  return (exe.parent_path() / "default-model").string();
}

// --decode-lane auto (the default): two step loops where they are measured
// (one GPU, the dense family on CUDA), one elsewhere. The lane gets the fewest
// SMs on which the chats' step keeps the pace (auto_decode_lane_sms): 8 for
// Llama-3-8B, where S17-lead-1 measured the burst at 1.10x prefill-first's
// time and a 26.4 s mean first token, against 1.13x and 27.2 s on 16 SMs,
// every chat above 24 tok/s with no gap over 150 ms on both
// (docs/benchmarks.md). High priority on shared SMs gave the chats 10 tok/s
// beside deep prefixes (S13-lead-2).
// --max-step-ms, --min-prefill-share and --max-token-gap-ms size the steps of
// one loop (the prefill lane's chunks go by --max-num-batched-tokens), so
// giving any keeps auto at one loop.
// Whether auto may give two loops (the lane's size decides the rest). The
// other policies emulate other engines' single loops.
bool auto_may_give_two_loops(const ServeArgs& args, const std::string& model_type) {
  return args.device == "cuda" && args.tensor_parallel_size == 1 && args.scheduling_policy == "sluice" &&
         !args.engine.async_scheduling && !model_type.starts_with("deepseek") && !args.step_time_flags_given;
}

Result<std::string> resolve_decode_lane(const ServeArgs& args, const ModelConfig& config,
                                        const std::string& model_type) {
  if (args.decode_lane != "auto") return args.decode_lane;
  if (!auto_may_give_two_loops(args, model_type)) return std::string("off");
  // An unpaced lane is still sized for the default pace: what the chats need.
  const double pace_ms = args.decode_lane_interval_ms.value_or(0.0) > 0.0 ? *args.decode_lane_interval_ms
                                                                          : kDefaultDecodeLaneIntervalMs;
  const std::int32_t max_context =
      args.engine.max_model_len_tokens > 0 ? args.engine.max_model_len_tokens : config.max_position_embeddings;
  SLUICE_TRY_ASSIGN(lane, auto_decode_lane(args.model_dir, pace_ms, max_context));
  if (lane.num_sms == 0) {
    spdlog::warn("--decode-lane auto: no lane of up to half the SMs decodes this model's chats within {} ms; "
                 "serving with one step loop",
                 pace_ms);
    return std::string("off");
  }
  // Sized for short chats: say how far that reaches, and what reaches further.
  spdlog::info("--decode-lane auto: sms:{}, on which the cost model keeps 8 chats at 20 tok/s up to {} tokens of "
               "context each (more SMs hold longer chats: --decode-lane sms:{})",
               lane.num_sms, lane.chats_context_at_20_tok_s, 2 * lane.num_sms);
  return "sms:" + std::to_string(lane.num_sms);
}

// --block-size, or 64 tokens a page on cuda for the models whose prefill
// attention is cuDNN's paged SDPA: the burst's 8k-row chunks over 16k-100k
// prefixes ran 9-14% faster than in vLLM's pages of 16, and the burst's mean
// first token fell from 25.9 to 24.5 s (S18-lead-2). DeepSeek's attention is
// its own: 16, the others' default, for MLA; V4's compressed layout takes
// blocks of whole compression windows, large ones
// (deepseek_v4_default_block_size).
std::int32_t block_size_tokens(const ServeArgs& args, const ModelConfig& config, const std::string& model_type) {
  if (args.block_size_tokens) return *args.block_size_tokens;
  if (config.deepseek_v4 != nullptr) return deepseek_v4_default_block_size(config);
  return args.device == "cuda" && !model_type.starts_with("deepseek") ? 64 : 16;
}

Result<std::string> read_model_type(const std::string& model_dir) {
  SLUICE_TRY_ASSIGN(text, read_file(model_dir + "/config.json"));
  const auto config = nlohmann::json::parse(text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return Error{model_dir + "/config.json is not a JSON object"};
  return config.value("model_type", std::string());
}

Result<std::shared_ptr<server::ModelContext>> load_model(const ServeArgs& args) {
  const std::string& dir = args.model_dir;
  const auto started = std::chrono::steady_clock::now();
  SLUICE_TRY_ASSIGN(config, load_model_config(dir));
  SLUICE_TRY_ASSIGN(model_type, read_model_type(dir));
  SLUICE_TRY_ASSIGN(tokenizer, Tokenizer::load(args.tokenizer_dir.empty() ? dir : args.tokenizer_dir));
  auto context = std::make_shared<server::ModelContext>(server::ModelContext{.tokenizer = std::move(tokenizer)});
  context->model_type = model_type;
  context->served_model_names = args.served_model_names;
  if (context->served_model_names.empty())
    context->served_model_names.push_back(args.model_dir.empty() ? "default" : args.model_dir);
  std::string chat_template = context->tokenizer.chat_template();
  if (!args.chat_template_path.empty()) {
    SLUICE_TRY_ASSIGN(text, read_file(args.chat_template_path));
    chat_template = std::move(text);
  }
  if (!chat_template.empty()) {
    auto parsed = api::ChatTemplate::parse(chat_template);
    if (!parsed)
      return Error{(args.chat_template_path.empty() ? dir : args.chat_template_path) +
                   ": chat template: " + parsed.error().message};
    context->chat_template = std::move(parsed).value();
  } else if (model_type == "deepseek_v4") {
    // DeepSeek-V4 ships its Python encoder, not a template: sluice's rendering of it.
    context->chat_template = api::ChatTemplate::native(&api::render_deepseek_v4_chat);
  } else {
    spdlog::warn("{} has no chat template: /v1/chat/completions will refuse requests", dir);
  }
  if (!args.default_chat_template_kwargs.empty()) {
    auto kwargs = nlohmann::ordered_json::parse(args.default_chat_template_kwargs, nullptr, false);
    if (kwargs.is_discarded() || !kwargs.is_object())
      return Error{"--default-chat-template-kwargs must be a JSON object"};
    for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt", "tokenize"})
      if (kwargs.contains(reserved))
        return Error{fmt::format("--default-chat-template-kwargs may not set '{}'", reserved)};
    context->default_template_kwargs = std::move(kwargs);
  }
  SLUICE_TRY_ASSIGN(format, server::output_format_for_parsers({.reasoning = args.reasoning_parser,
                                                                 .tool_call = args.tool_call_parser},
                                                                model_type));
  context->output_format = std::move(format);
  if (args.enable_auto_tool_choice && context->output_format.tool_syntax == server::ToolCallSyntax::kNone)
    return Error{fmt::format("--enable-auto-tool-choice: output format {} (model_type {}) parses no tool calls; name "
                             "the model's syntax with --tool-call-parser (hermes, qwen3, qwen3_coder, llama3_json, "
                             "deepseek_v3, deepseek_v31)",
                             context->output_format.name, model_type)};
  SLUICE_TRY_ASSIGN(generation_defaults, server::read_generation_defaults(args.generation_config, dir));
  context->request_defaults = generation_defaults;
  for (std::int32_t id : config.eos_token_ids) context->eos_token_ids.push_back(id);
  if (auto eos = context->tokenizer.eos_token_id(); eos && std::find(context->eos_token_ids.begin(),
                                                                     context->eos_token_ids.end(),
                                                                     *eos) == context->eos_token_ids.end())
    context->eos_token_ids.push_back(*eos);

  SLUICE_TRY_ASSIGN(decode_lane_name, resolve_decode_lane(args, config, model_type));
  SLUICE_TRY_ASSIGN(decode_lane_setting, parse_decode_lane(decode_lane_name));
  const bool gemm_target_asked = args.cuda.gemm_sm_count_target.value_or(false);
  if (gemm_target_asked && decode_lane_setting.lane != DecodeLane::kSms)
    return Error{"--cuda-gemm-sm-count-target plans the prefill lane's GEMMs for its SMs: it needs --decode-lane "
                 "sms:N (the decode lane here is " + decode_lane_name + ")"};
  CudaOptions cuda = cuda_options(args.cuda);
  // A decode lane on N SMs of its own: the prefill lane (the backend's own
  // stream) on every other one. Beside 8 SMs cuBLASLt planned for the rest
  // wins (S17-lead-3, S18-lead-1); beside more it lost, so it stays off there.
  if (decode_lane_setting.lane == DecodeLane::kSms) cuda.stream_sms = -decode_lane_setting.num_sms;
  cuda.gemm_sm_count_target = args.cuda.gemm_sm_count_target.value_or(
      decode_lane_setting.lane == DecodeLane::kSms && decode_lane_setting.num_sms == 8);
  cuda.cudnn_plans_before_serving = decode_lane_setting.lane != DecodeLane::kOff;
  auto make_backend = [&](const CudaOptions& cuda_options) {
    return make_serve_backend({.device = args.device,
                               .model_dir = dir,
                               .block_size_tokens = block_size_tokens(args, config, model_type),
                               .max_model_len_tokens = args.engine.max_model_len_tokens,
                               .max_num_seqs = args.engine.max_num_seqs,
                               .max_num_batched_tokens = args.engine.max_num_batched_tokens,
                               .kv_cache_memory_bytes = args.kv_cache_memory_bytes,
                               .gpu_memory_utilization = args.gpu_memory_utilization.value_or(0.9),
                               .tensor_parallel_size = args.tensor_parallel_size,
                               .enable_expert_parallel = args.enable_expert_parallel,
                               .kv_cache_dtype = args.kv_cache_dtype == "auto" ? KvCacheDtype::kAuto
                                                                                : KvCacheDtype::kFp8,
                               .cuda = cuda_options,
                               .num_threads = args.num_threads,
                               .sim_profile = args.sim_profile,
                               .sim_speed = args.sim_speed,
                               .sim_eos_every = args.sim_eos_every,
                               .show_progress = isatty(2) != 0},
                              context->tokenizer, context->eos_token_ids);
  };
  auto made = make_backend(cuda);
  // The prefill lane's partition is made with the backend. Asked for, a
  // refusal there names the flag; chosen by auto (a GPU or driver without
  // green contexts), the server runs one loop instead.
  if (!made.ok() && decode_lane_setting.lane == DecodeLane::kSms) {
    const std::string why = "--decode-lane " + to_string(DecodeLane::kSms, decode_lane_setting.num_sms) + ": " +
                            made.error_message();
    if (args.decode_lane != "auto") return Error{why};
    if (gemm_target_asked) return Error{"--cuda-gemm-sm-count-target needs the decode lane's SMs: " + why};
    spdlog::warn("--decode-lane auto: {}; serving with one step loop", why);
    decode_lane_setting = DecodeLaneSetting{};
    cuda.stream_sms = 0;
    cuda.gemm_sm_count_target = false;
    cuda.cudnn_plans_before_serving = false;
    made = make_backend(cuda);
  }
  SLUICE_TRY_ASSIGN(served, std::move(made));
  std::unique_ptr<Backend> backend = std::move(served.backend);
  EngineConfig engine_config = args.engine;
  SLUICE_TRY_ASSIGN(scheduling, parse_scheduling_policy(args.scheduling_policy));
  SLUICE_TRY_ASSIGN(eviction, parse_eviction_policy(args.eviction_policy));
  engine_config.scheduling = scheduling;
  engine_config.eviction = eviction;
  engine_config.decode_lane = decode_lane_setting.lane;
  engine_config.decode_lane_sms = decode_lane_setting.num_sms;
  // The pace is device time; the engine waits on the wall clock, which a sim
  // paced at --sim-speed S runs S times faster than the device. An unpaced
  // sim (speed 0) has no device time on the wall clock to pace against.
  double pace_ms = decode_lane_interval_or_default(args.decode_lane_interval_ms, decode_lane_setting.lane);
  if (args.device == "sim" && pace_ms > 0.0 && args.sim_speed <= 0.0) {
    if (args.decode_lane_interval_ms)
      return Error{"--decode-lane-interval-ms paces on the device's time: the sim needs --sim-speed > 0 for it"};
    pace_ms = 0.0;
    spdlog::info("--sim-speed 0: the decode lane runs back to back (its pace is device time, which an unpaced "
                 "sim has none of on the wall clock)");
  }
  engine_config.decode_lane_interval_ms = args.device == "sim" && pace_ms > 0.0 ? pace_ms / args.sim_speed : pace_ms;
  if (engine_config.decode_lane != DecodeLane::kOff)
    engine_config.decode_lane_max_context =
        decode_lane_max_context(engine_config, backend->info(), served.cost_model.get());
  SLUICE_TRY_ASSIGN(host_eviction, parse_eviction_policy(args.kv_offloading_eviction));
  engine_config.kv_offloading_eviction = host_eviction;
  engine_config.kv_offloading_bytes = static_cast<std::int64_t>(args.kv_offloading_size_gib * 1073741824.0);
  SLUICE_TRY(validate(engine_config, backend->info()));
  // The largest step's memory, taken before serving (prefill_warmup.h).
  if (args.device == "cuda") {
    SLUICE_TRY_ASSIGN(prefill, warm_largest_prefill(*backend, engine_config.max_num_batched_tokens));
    spdlog::info("the largest prefill chunk ran before serving: {} tokens after {} in {:.1f} s{}",
                 prefill.shape.num_new_tokens, prefill.shape.num_computed_tokens, prefill.seconds,
                 prefill.free_bytes_after
                     ? fmt::format("; {:.2f} GiB of device memory free after it",
                                   *prefill.free_bytes_after / 1073741824.0)
                     : std::string());
  }
  SLUICE_TRY_ASSIGN(decode_lane, make_decode_lane(*backend, engine_config));
  // Kernels load lazily on a GPU only; the sim and the CPU have none to load.
  if (decode_lane && args.device == "cuda") {
    SLUICE_TRY_ASSIGN(warmed, warm_decode_lane(*decode_lane, backend->info(), engine_config.max_num_seqs,
                                               engine_config.decode_lane_max_context));
    spdlog::info("decode lane warmed before serving: {} steps of 1-{} sequences at up to {} tokens in {:.1f} s",
                 warmed.num_steps, warmed.batch_sizes.back(), warmed.contexts.back(), warmed.seconds);
  }
  // JSON mode's vocabulary index: built once here (a few hundred ms for 128k
  // tokens) so no request pays for it.
  context->json_vocabulary = structured::make_json_vocabulary(context->tokenizer, backend->info().vocab_size);
  context->engine = std::make_unique<Engine>(std::move(backend), std::move(served.cost_model), engine_config,
                                             std::move(decode_lane));
  if (engine_config.decode_lane != DecodeLane::kOff)
    spdlog::info("two step loops: decodes of contexts up to {} tokens on a second lane ({}, a step at most every "
                 "{} ms), prefill chunks up to {} tokens and longer decodes on the first{}",
                 engine_config.decode_lane_max_context,
                 to_string(engine_config.decode_lane, engine_config.decode_lane_sms), pace_ms,
                 engine_config.max_num_batched_tokens,
                 cuda.gemm_sm_count_target ? " (cuBLASLt planned for its SMs)" : "");
  const BackendInfo& info = context->engine->backend_info();
  // The KV bytes a token as the backend lays its blocks out (DeepSeek-V4: --kv-cache-dtype's records).
  const std::string kv_bytes =
      info.kv_bytes_per_block > 0 && info.block_size_tokens > 0
          ? fmt::format(" ({} B a token, --kv-cache-dtype {})", info.kv_bytes_per_block / info.block_size_tokens,
                        args.kv_cache_dtype)
          : std::string();
  spdlog::info("model {} ({}) on {}: {} layers, vocab {}, max_model_len {}, {} KV blocks of {} tokens{}, output "
               "format {}",
               dir, model_type, args.device, config.num_layers, info.vocab_size,
               context->engine->request_limits().max_model_len_tokens, info.num_kv_blocks, info.block_size_tokens,
               kv_bytes, context->output_format.name);
  spdlog::info("cost model: {}", served.cost_model_description);
  spdlog::info("request defaults from --generation-config {}: {}", args.generation_config,
               server::describe(context->request_defaults));
  spdlog::info("tokenizer from {}, chat template from {}", args.tokenizer_dir.empty() ? dir : args.tokenizer_dir,
               !args.chat_template_path.empty() ? args.chat_template_path
               : chat_template.empty() && model_type == "deepseek_v4"
                   ? std::string("sluice's DeepSeek-V4 encoding (the checkpoint ships none)")
               : chat_template.empty() ? std::string("nowhere (none)")
                                                : std::string("the tokenizer config"));
  context->created_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("model loaded in {:.2f} s", load_s);
  return context;
}

// vLLM's --max-model-len forms: "auto" (the model's), a count, or a count with
// k/m/g (x1000) or K/M/G (x1024), as vLLM reads them.
Result<std::int32_t> parse_max_model_len(const std::string& text) {
  if (text == "auto") return 0;
  std::size_t digits = 0;
  double value = 0;
  try {
    value = std::stod(text, &digits);
  } catch (const std::exception&) {
    digits = 0;
  }
  const std::string suffix = text.substr(digits);
  double scale = 1;
  if (suffix == "k") scale = 1e3;
  else if (suffix == "m") scale = 1e6;
  else if (suffix == "g") scale = 1e9;
  else if (suffix == "K") scale = 1024.0;
  else if (suffix == "M") scale = 1024.0 * 1024.0;
  else if (suffix == "G") scale = 1024.0 * 1024.0 * 1024.0;
  else if (!suffix.empty()) digits = 0;
  const double tokens = value * scale;
  if (digits == 0 || tokens < 0 || tokens != static_cast<double>(static_cast<std::int64_t>(tokens)) ||
      tokens > std::numeric_limits<std::int32_t>::max())
    return Error{fmt::format("--max-model-len {}: expected auto, a token count, or a count with k/m/K/M", text)};
  return static_cast<std::int32_t>(tokens);
}

// vLLM's --dtype on this --device: what the backend computes in is honoured
// (a no-op that is true), anything else refused with the reason.
Status check_dtype(const std::string& dtype, const std::string& device) {
  if (dtype == "auto") return Ok{};
  const bool known = dtype == "bfloat16" || dtype == "float16" || dtype == "half" || dtype == "float32" ||
                     dtype == "float";
  if (!known) return Error{fmt::format("--dtype {}: vLLM's values are auto, bfloat16, float16 (half), float32 (float)", dtype)};
  if (device == "cuda") {
    if (dtype == "bfloat16") return Ok{};
    return Error{fmt::format("--dtype {} is refused with --device cuda: the CUDA backend computes in bfloat16 "
                             "(activations and KV, float32 reductions); use auto or bfloat16",
                             dtype)};
  }
  if (device == "cpu") {
    if (dtype == "float32" || dtype == "float") return Ok{};
    return Error{fmt::format("--dtype {} is refused with --device cpu: the CPU reference computes in float32 "
                             "(weights are widened on load); use auto or float32",
                             dtype)};
  }
  return Error{fmt::format("--dtype {} is refused with --device {}: the simulated device's bytes per weight come "
                           "from config.json (or --sim-profile); use auto",
                           dtype, device)};
}

// Flags that would do nothing with this --device: refused, never ignored.
// Every refusal is reported, one line each, so one start shows all there is to change.
Status check_inert_flags(const ServeArgs& args, const CLI::App& cmd) {
  auto given = [&cmd](const char* flag) { return cmd.count(flag) > 0; };
  std::vector<std::string> errors;
  auto refuse = [&errors](Status status) {
    if (!status) errors.push_back(status.error().message);
  };
  if (args.tensor_parallel_size < 1)
    errors.push_back(fmt::format("--tensor-parallel-size {} must be >= 1", args.tensor_parallel_size));
  if (args.device == "cuda" && args.tensor_parallel_size != 1)
    errors.push_back(fmt::format("--tensor-parallel-size {} (-tp) has no effect with --device cuda: it runs on one "
                                 "GPU until the NCCL communicator is wired to CUDA (--device cpu runs the ranks as "
                                 "threads; --device sim replays an N-GPU launch)",
                                 args.tensor_parallel_size));
  if (args.device == "cpu" && args.tensor_parallel_size > 1) {
    // Refused with the other flags rather than at load; a config that does
    // not read is reported when the model loads.
    const std::string& dir = args.model_positional.empty() ? args.model_dir : args.model_positional;
    if (auto config = load_model_config(dir); config.ok())
      refuse(check_tensor_parallel(*config, args.tensor_parallel_size, args.enable_expert_parallel));
  }
  if (args.device == "cpu" && args.tensor_parallel_size > 1 && args.kv_offloading_size_gib > 0)
    errors.push_back("--kv-offloading-size is not implemented with --tensor-parallel-size > 1: the host tier copies "
                     "one rank's KV pages");
  if (args.device == "cuda" && args.enable_expert_parallel)
    errors.push_back("--enable-expert-parallel has no effect with --device cuda: it runs on one device, every expert "
                     "is local (--device cpu runs expert-parallel ranks as threads; --device sim replays an "
                     "expert-parallel launch)");
  if (args.device != "cuda" && args.enable_expert_parallel && args.tensor_parallel_size == 1)
    errors.push_back("--enable-expert-parallel needs --tensor-parallel-size > 1: experts are split over those ranks");
  if (args.gpu_memory_utilization && (*args.gpu_memory_utilization <= 0 || *args.gpu_memory_utilization > 1))
    errors.push_back(fmt::format("--gpu-memory-utilization {} must be in (0, 1]", *args.gpu_memory_utilization));
  if (args.device == "cuda") {
#if !SLUICE_HAVE_CUDA
    errors.push_back("--device cuda: this build has no CUDA backend (configure with -DSLUICE_CUDA=ON)");
#endif
    if (given("--kv-cache-memory"))
      errors.push_back("--kv-cache-memory has no effect with --device cuda: the KV cache is sized by "
                       "--gpu-memory-utilization");
  } else if (args.device == "cpu" && args.gpu_memory_utilization) {
    errors.push_back("--gpu-memory-utilization has no effect with --device cpu; size the KV cache with "
                     "--kv-cache-memory");
  }
  refuse(check_cuda_flags(cmd, args.device));
  refuse(check_dtype(args.dtype, args.device));
  if (args.device != "cpu" && given("--threads"))
    errors.push_back(fmt::format("--threads has no effect with --device {} (CPU compute threads)", args.device));
  if (args.device != "sim")
    for (const char* flag : {"--sim-profile", "--sim-speed", "--sim-eos-every"})
      if (given(flag)) errors.push_back(fmt::format("{} has no effect without --device sim", flag));
  if (!args.engine.enable_prefix_caching && args.eviction_policy != "slru")
    errors.push_back("--kv-eviction-policy has no effect with --no-enable-prefix-caching");
  // An explicit lane (auto stays one loop when the flag is given).
  if (given("--max-token-gap-ms") && args.decode_lane != "auto" && args.decode_lane != "off")
    errors.push_back("--max-token-gap-ms has no effect with --decode-lane " + args.decode_lane +
                     ": the decodes run on their own lane, beside chunks sized by --max-num-batched-tokens");
  if (args.kv_offloading_size_gib < 0)
    errors.push_back(fmt::format("--kv-offloading-size {} must be >= 0 (GiB)", args.kv_offloading_size_gib));
  if (args.kv_offloading_size_gib > 0 && !args.engine.enable_prefix_caching)
    errors.push_back("--kv-offloading-size has no effect with --no-enable-prefix-caching: the host tier holds "
                     "prefixes");
  if (args.kv_offloading_backend != "native")
    errors.push_back(fmt::format("--kv-offloading-backend {}: only native (sluice's own host memory tier) exists",
                                 args.kv_offloading_backend));
  if (args.kv_offloading_size_gib == 0 && (given("--kv-offloading-backend") || given("--kv-offloading-min-hits") ||
                                           given("--kv-offloading-eviction")))
    errors.push_back("--kv-offloading-backend, --kv-offloading-min-hits and --kv-offloading-eviction have no effect "
                     "without --kv-offloading-size");
  if (args.kv_cache_dtype != "auto") {
    // Refused with the other flags where no FP8 layout exists; the model
    // checks again at load (DecoderModel::set_kv_cache_dtype), the simulator's
    // profile there (sim::with_fp8_kv_cache).
    const std::string& dir = args.model_positional.empty() ? args.model_dir : args.model_positional;
    if (args.device == "cpu") {
      errors.push_back(fmt::format("--kv-cache-dtype {}: --device cpu keeps the KV cache in the model's dtype (f32); "
                                   "only deepseek_v4 on --device cuda stores FP8 (fp8_ds_mla records)",
                                   args.kv_cache_dtype));
    } else if (args.device == "cuda") {
      if (auto model_type = read_model_type(dir); model_type.ok() && *model_type != "deepseek_v4")
        errors.push_back(fmt::format("--kv-cache-dtype {}: on --device cuda only deepseek_v4 stores its KV cache in "
                                     "FP8 (fp8_ds_mla records); model_type {} keeps bf16",
                                     args.kv_cache_dtype, *model_type));
    }
  }
  refuse(server::check_parser_names({.reasoning = args.reasoning_parser, .tool_call = args.tool_call_parser}));
  if (errors.empty()) return Ok{};
  std::string message;
  for (const std::string& line : errors) message += (message.empty() ? "" : "\n") + line;
  return Error{message};
}

void log_flags(CLI::App& cmd) {
  for (const CLI::Option* option : cmd.get_options()) {
    if (option->get_name() == "--help") continue;
    std::string value;
    if (option->count() > 0) {
      for (const std::string& r : option->results()) value += (value.empty() ? "" : " ") + r;
    } else {
      value = option->get_default_str();
    }
    spdlog::info("flag {} = {}", option->get_name(), value.empty() ? "(unset)" : value);
  }
}

Status run_serve(ServeArgs args, CLI::App& cmd) {
  spdlog::set_level(spdlog::level::from_str(args.log_level));
  log_flags(cmd);
  SLUICE_TRY(check_inert_flags(args, cmd));
  args.step_time_flags_given =
      cmd.count("--max-step-ms") + cmd.count("--min-prefill-share") + cmd.count("--max-token-gap-ms") > 0;
  if (!args.model_positional.empty()) {
    if (!args.model_dir.empty() && args.model_dir != args.model_positional)
      return Error{fmt::format("two models given: {} (positional) and --model {}", args.model_positional,
                               args.model_dir)};
    args.model_dir = args.model_positional;
  }
  SLUICE_TRY_ASSIGN(max_model_len_tokens, parse_max_model_len(args.max_model_len));
  args.engine.max_model_len_tokens = max_model_len_tokens;
  args.server.service.enable_auto_tool_choice = args.enable_auto_tool_choice;
  args.server.service.enable_prompt_tokens_details = args.enable_prompt_tokens_details;
  if (args.seed) args.server.service.default_seed = static_cast<std::uint64_t>(*args.seed);
  if (args.disable_log_stats) {
    args.stats_log_interval_s = 0;
    spdlog::info("--disable-log-stats: stats log line off (--stats-log-interval 0)");
  }
  if (args.model_dir.empty()) {
    args.model_dir = default_model_dir();
    if (args.served_model_names.empty()) args.served_model_names.push_back("default");
    if (!std::filesystem::exists(args.model_dir + "/config.json"))
      return Error{fmt::format("no --model given and the built-in default model is missing at {} "
                               "(scripts/make-default-model writes it)",
                               args.model_dir)};
  }
  auto to_ms = [](double s) { return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0)); };
  args.server.shutdown_timeout = to_ms(args.shutdown_timeout_s);
  args.server.service.keepalive_interval = to_ms(args.keepalive_interval_s);
  args.server.stats_log_interval = to_ms(args.stats_log_interval_s);
  // Two step loops load every kernel before serving: a kernel loaded lazily
  // on first use (a cuBLASLt GEMM of a new row count, the GEMV of a first
  // 1-row sample) waits for the whole context, so the decode lane's step
  // beside it waited for the prefill lane's chunk (250-465 ms gaps in
  // S18-lead-1..3; none in S18-lead-4). Set here, before the first CUDA call
  // and before the server's threads start (setenv is unsafe beside them),
  // wherever the decode lane may be on; an operator's own setting wins.
  if (args.device == "cuda" && args.decode_lane != "off") {
    const Result<std::string> model_type = read_model_type(args.model_dir);  // a failure is load_model's to report
    const bool may_have_lanes =
        args.decode_lane != "auto" || (model_type.ok() && auto_may_give_two_loops(args, model_type.value()));
    if (may_have_lanes && setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0) == 0)
      spdlog::info("two step loops may run: CUDA kernels load before serving (CUDA_MODULE_LOADING=EAGER unless "
                   "the environment sets it)");
  }
  if (args.check_only) {
    SLUICE_TRY_ASSIGN(context, load_model(args));
    spdlog::info("--check-only: flags and model ok; serving {} not started", context->served_model_names.front());
    return Ok{};
  }
  return server::run_server(args.server, [&args] { return load_model(args); });
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (CPU, CUDA or simulated backend)");
  cmd->option_defaults()->always_capture_default();
  auto& a = *args;
  cmd->add_option("model", a.model_positional, "the model directory, as `vllm serve MODEL` takes it");
  cmd->add_option("--model", a.model_dir, "Hugging Face model directory (default: the built-in default model)");
  cmd->add_option("--host", a.server.host, "address to bind (127.0.0.1 keeps it local)");
  cmd->add_option("--port", a.server.port, "port (0 = any free port; the bound one is printed)");
  cmd->add_option("--api-key", a.server.service.api_key, "required as 'Authorization: Bearer KEY' on every route but /health");
  cmd->add_option("--tokenizer", a.tokenizer_dir, "directory of tokenizer.json (default: the model directory)");
  cmd->add_option("--chat-template", a.chat_template_path, "Jinja chat template file (default: the tokenizer's)");
  cmd->add_option("--default-chat-template-kwargs", a.default_chat_template_kwargs,
                  "JSON object of chat template variables; a request's chat_template_kwargs override them");
  cmd->add_option("--served-model-name", a.served_model_names, "names clients may use; the first is reported");
  cmd->add_option("--max-model-len", a.max_model_len,
                  "prompt + output tokens: auto or 0 (the model's), N, or 128k (x1000) / 128K (x1024)");
  cmd->add_option("--max-num-seqs", a.engine.max_num_seqs, "running requests at once")->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", a.engine.max_num_batched_tokens, "tokens per engine step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--long-prefill-token-threshold", a.engine.long_prefill_token_threshold,
                  "per-request prefill chunk cap (0 = none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", a.engine.enable_prefix_caching,
                "reuse KV blocks of shared prompt prefixes");
  cmd->add_option("--kv-eviction-policy", a.eviction_policy, "prefix cache eviction: lru, slru, prefix-aware, reuse-history or adaptive-reuse");
  cmd->add_option("--kv-offloading-size", a.kv_offloading_size_gib,
                  "GiB of host memory for a KV tier below the device (0 = none): evicted prefixes are kept there "
                  "and loaded back when that is cheaper than recomputing");
  cmd->add_option("--kv-offloading-backend", a.kv_offloading_backend, "native (the only one)");
  cmd->add_option("--kv-cache-dtype", a.kv_cache_dtype,
                  "auto (the model's dtype) | fp8 | fp8_e4m3 | fp8_ds_mla: DeepSeek-V4 on --device cuda stores its "
                  "latents and compressed entries as fp8_ds_mla records (584 B against bf16's 1024)")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3", "fp8_ds_mla"}));
  cmd->add_option("--kv-offloading-eviction", a.kv_offloading_eviction,
                  "host tier eviction: lru (default), slru, reuse-history or adaptive-reuse (ranked by how many "
                  "requests used a block's key, learnt against LRU)");
  cmd->add_option("--kv-offloading-min-hits", a.engine.kv_offloading_admission.min_hits,
                  "device prefix hits a block needs before it is kept in the host tier (0 = every block)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--scheduling-policy", a.scheduling_policy,
                  "sluice, fcfs, round-robin, prefill-first, decode-first-token-budget");
  cmd->add_option("--max-num-queued-reqs", a.engine.max_num_queued_requests, "waiting requests before 503")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-queued-tokens", a.engine.max_num_queued_tokens,
                  "waiting prompt tokens before 503 (0 = unlimited)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-step-ms", a.engine.max_step_ms, "predicted-time bound of one engine step");
  cmd->add_option("--min-prefill-share", a.engine.min_prefill_share,
                  "share of step time prefill keeps when decodes alone nearly fill --max-step-ms");
  cmd->add_option("--max-token-gap-ms", a.engine.max_token_gap_ms,
                  "the longest predicted step that carries decodes: a chunk whose fixed cost (MLA's K/V "
                  "decompression over a long prefix) would fill most of a --max-step-ms step runs in one step "
                  "up to this long, which the next steps pay back so decodes keep --max-step-ms on average "
                  "(0 = 3 x --max-step-ms, the default; --max-step-ms: never)");
  cmd->add_option("--step-trace", a.engine.step_trace_path,
                  "write one JSON line per engine step (shape, measured and predicted ms) to this file, for "
                  "`sluice calibrate`");
  cmd->add_option("--decode-lane", a.decode_lane,
                  "auto, off, stream, high-priority or sms:N: decodes run on a second step loop of their own (a "
                  "stream, one at the highest priority, or one on N SMs with the prefill on the others) beside "
                  "prefill chunks of --max-num-batched-tokens; auto: sms:16 with one GPU on cuda for the "
                  "dense family under --scheduling-policy sluice unless --max-step-ms or --min-prefill-share is "
                  "given, off otherwise (the default)");
  cmd->add_option("--decode-lane-max-context", a.engine.decode_lane_max_context,
                  "the longest context a decode on the decode lane may have; longer ones decode in the prefill "
                  "lane's steps (0 = where one sequence's KV read costs a quarter of the weights' read, by the "
                  "cost model)");
  cmd->add_option("--decode-lane-interval-ms", a.decode_lane_interval_ms,
                  "the least time between the starts of two decode-lane steps, the chats' inter-token target with "
                  "two loops (default 40 with a decode lane; 0 = back to back, which takes HBM bandwidth from the "
                  "prefill beside them)");
  cmd->add_flag("--async-scheduling,!--no-async-scheduling", a.engine.async_scheduling,
                "plan and submit the next step while the backend runs the current one (stops are seen a step late)");
  cmd->add_option("--shutdown-timeout", a.shutdown_timeout_s, "seconds to drain on SIGTERM before aborting")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--block-size", a.block_size_tokens,
                  "KV block size in tokens (default: 64 on cuda, where cuDNN's paged attention runs 9-14% faster "
                  "than at 16; 16 on cpu and sim and for DeepSeek-V3; DeepSeek-V4: 1024, whole compression "
                  "windows)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", a.device, "cpu (the reference), cuda, or sim (steps simulated by the cost model)")
      ->check(CLI::IsMember({"cpu", "cuda", "sim"}));
  cmd->add_option("--kv-cache-memory", a.kv_cache_memory_bytes,
                  "KV cache size in bytes (cpu: default 1 GiB; sim: default from --gpu-memory-utilization)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--gpu-memory-utilization", a.gpu_memory_utilization,
                  "cuda, sim: share of device memory for weights, activations and KV (default 0.9)");
  add_cuda_flags(*cmd, a.cuda);
  cmd->add_option("--threads", a.num_threads, "CPU compute threads (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--sim-profile", a.sim_profile,
                  "sim: builtin cost profile (llama-3-8b, llama-3-70b, deepseek-v4.1-flash); default: the model's config");
  cmd->add_option("--sim-speed", a.sim_speed, "sim: predicted step time / wall time (0 = no pacing)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--sim-eos-every", a.sim_eos_every, "sim: every Nth generated token is EOS (0 = never)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--api-threads", a.server.num_io_threads, "HTTP threads")->check(CLI::PositiveNumber);
  cmd->add_option("--tokenizer-threads", a.server.service.num_tokenizer_threads,
                  "threads that parse, render and tokenize requests (off the HTTP threads)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--reasoning-parser", a.reasoning_parser,
                  "reasoning markers: auto (by model_type), none, qwen3, deepseek_r1, deepseek_v3");
  cmd->add_option("--max-request-body-bytes", a.server.http.max_body_bytes, "413 beyond")->check(CLI::PositiveNumber);
  cmd->add_option("--max-request-header-bytes", a.server.http.max_header_bytes, "431 beyond")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-n", a.server.service.limits.max_n, "cap on n")->check(CLI::PositiveNumber);
  cmd->add_option("--max-logprobs", a.server.service.limits.max_logprobs, "cap on top_logprobs / logprobs")
      ->check(CLI::Range(0, 20));
  cmd->add_option("--max-stop-sequences", a.server.service.limits.max_stop_sequences, "cap on the stop list")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-tools", a.server.service.limits.max_tools, "cap on tools")->check(CLI::PositiveNumber);
  cmd->add_flag("--trust-request-chat-template", a.server.service.limits.allow_request_chat_template,
                "accept a request-supplied chat_template (off: they are refused)");
  cmd->add_option("--sse-keepalive-interval", a.keepalive_interval_s,
                  "seconds between ': keep-alive' lines while a stream has nothing else to send (0 = off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--stats-log-interval", a.stats_log_interval_s, "seconds between stats log lines (0 = off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--disable-log-stats", a.disable_log_stats, "vLLM's name for --stats-log-interval 0");
  cmd->add_option("--tool-call-parser", a.tool_call_parser,
                  "tool-call syntax: hermes, qwen3, qwen3_coder, llama3_json, deepseek_r1, deepseek_v3, deepseek_v31 "
                  "(alone, its reasoning markers too)");
  cmd->add_flag("--enable-auto-tool-choice", a.enable_auto_tool_choice,
                "accept tool_choice auto (the default when tools are sent); without it such requests are a 400");
  cmd->add_flag("--enable-prompt-tokens-details,!--no-enable-prompt-tokens-details", a.enable_prompt_tokens_details,
                "usage.prompt_tokens_details.cached_tokens in responses");
  cmd->add_option("--seed", a.seed, "the seed of requests that send none (default: a random seed per request)");
  cmd->add_option("--dtype", a.dtype,
                  "auto; bfloat16 (--device cuda) or float32 (--device cpu): what the backend computes in");
  cmd->add_option("--generation-config", a.generation_config,
                  "auto (the model's generation_config.json sets request defaults), vllm (neutral defaults), or a "
                  "directory holding generation_config.json");
  cmd->add_flag("--check-only", a.check_only, "check the flags and load the model, then exit without serving");
  cmd->add_flag_callback(
      "--vllm-flags",
      [] {
        std::fputs(vllm_flags_markdown().c_str(), stdout);
        throw CLI::Success();
      },
      "print how each vLLM flag maps to sluice, then exit");
  cmd->add_option("--tensor-parallel-size", a.tensor_parallel_size,
                  "ranks the model is split over (vLLM's -tp too): cpu: one thread each; cuda: 1; "
                  "sim: an N-GPU launch replayed");
  cmd->add_flag("--enable-expert-parallel", a.enable_expert_parallel,
                "cpu, sim: MoE routed experts split whole over the --tensor-parallel-size ranks, as vLLM's flag "
                "(without it each expert's width is split)");
  cmd->add_option("--log-level", a.log_level, "trace, debug, info, warn, error");
  cmd->callback([args, cmd] {
    if (auto status = run_serve(*args, *cmd); !status) {
      log_error_lines(status.error().message);
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace sluice::cli
