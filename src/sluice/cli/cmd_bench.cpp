// `sluice bench serve`: a load generator for any OpenAI-compatible server
// (workloads, streaming client, metrics, table / JSON / SVG), and
// `sluice bench compare`: two reports metric by metric (simulator calibration).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sluice/cli/commands.h"
#include "sluice/common/io.h"
#include "sluice/loadgen/bench_runner.h"
#include "sluice/loadgen/metrics.h"
#include "sluice/loadgen/report.h"
#include "sluice/loadgen/report_compare.h"
#include "sluice/loadgen/server_target.h"
#include "sluice/loadgen/simple_http.h"
#include "sluice/loadgen/svg_plot.h"
#include "sluice/loadgen/workload.h"

namespace sluice::cli {
namespace {

using namespace sluice::loadgen;

constexpr int kExitBadInput = 1;
constexpr int kExitRunFailed = 2;
// Past this many token timestamps the JSON keeps summaries only (a full trace
// would write tens of MB); --token-times forces them in.
constexpr std::size_t kMaxAutoTokenTimes = 1'000'000;

struct BenchServeArgs {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model;
  std::string api_key;
  std::string endpoint = "completions";
  std::string prompt_format = "auto";
  std::string workload = "random";
  std::string label;
  std::uint64_t seed = 0;
  bool ignore_eos = true;
  double temperature = 0;
  std::int32_t token_id_min = 100;
  std::int32_t token_id_max = 1000;
  std::int32_t max_concurrency = 0;
  double server_speedup = 1;
  double max_duration_s = 0;
  double wait_for_server_s = 0;
  std::string output_json;
  std::string plot;
  bool no_progress = false;
  bool token_times = false;
  // Workload shapes; unset means the workload's default.
  std::optional<double> request_rate;
  std::optional<std::int32_t> num_prompts, input_len, output_len, min_input_len, max_input_len;
  std::optional<double> burst_start_s, burst_window_s;
  std::optional<std::int32_t> chats, chat_input_len, chat_output_len;
  std::optional<std::int32_t> sessions, turns, system_len, session_prefix_len;
  std::optional<double> think_ms, session_interval_ms;
  std::optional<double> time_scale;
  std::optional<std::int64_t> max_requests;
  std::optional<std::int32_t> trace_block_tokens;
  Slo slo;
};

[[noreturn]] void fail(int code, const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  throw CLI::RuntimeError(code);
}

// Workload-shape flags each workload reads; any other given is refused, never ignored.
const std::set<std::string>& flags_read_by(const std::string& workload) {
  static const std::set<std::string> random = {"--num-prompts", "--input-len", "--output-len", "--request-rate"};
  static const std::set<std::string> burst = {"--num-prompts",   "--min-input-len",  "--max-input-len",
                                              "--output-len",    "--burst-start-s",  "--burst-window-s",
                                              "--chats",         "--chat-input-len", "--chat-output-len"};
  static const std::set<std::string> sessions = {"--sessions",   "--turns",    "--system-len",         "--input-len",
                                                 "--output-len", "--think-ms", "--session-interval-ms",
                                                 "--session-prefix-len", "--chats", "--chat-input-len",
                                                 "--chat-output-len"};
  static const std::set<std::string> trace = {"--time-scale", "--max-requests", "--trace-block-tokens"};
  if (workload == "random") return random;
  if (workload == "burst") return burst;
  if (workload == "sessions") return sessions;
  return trace;
}

const std::set<std::string>& workload_shape_flags() {
  static const std::set<std::string> all = [] {
    std::set<std::string> s;
    for (const char* w : {"random", "burst", "sessions", "trace"}) {
      const auto& flags = flags_read_by(w);
      s.insert(flags.begin(), flags.end());
    }
    return s;
  }();
  return all;
}

Workload make_workload(const BenchServeArgs& a) {
  if (a.workload == "random") {
    RandomWorkloadOptions o{.seed = a.seed};
    o.num_prompts = a.num_prompts.value_or(o.num_prompts);
    o.input_tokens = a.input_len.value_or(o.input_tokens);
    o.output_tokens = a.output_len.value_or(o.output_tokens);
    o.request_rate_per_s = a.request_rate.value_or(kUnlimitedRate);
    return make_random_workload(o);
  }
  if (a.workload == "burst") {
    BurstWorkloadOptions o{.seed = a.seed};
    o.num_prompts = a.num_prompts.value_or(o.num_prompts);
    o.min_input_tokens = a.min_input_len.value_or(o.min_input_tokens);
    o.max_input_tokens = a.max_input_len.value_or(o.max_input_tokens);
    o.output_tokens = a.output_len.value_or(o.output_tokens);
    if (a.burst_start_s) o.start_ms = *a.burst_start_s * 1000.0;
    if (a.burst_window_s) o.window_ms = *a.burst_window_s * 1000.0;
    o.num_chats = a.chats.value_or(o.num_chats);
    o.chat_input_tokens = a.chat_input_len.value_or(o.chat_input_tokens);
    o.chat_output_tokens = a.chat_output_len.value_or(o.chat_output_tokens);
    if (o.min_input_tokens > o.max_input_tokens)
      fail(kExitBadInput, fmt::format("--min-input-len {} exceeds --max-input-len {}", o.min_input_tokens,
                                      o.max_input_tokens));
    return make_burst_workload(o);
  }
  if (a.workload == "sessions") {
    SessionsWorkloadOptions o{.seed = a.seed};
    o.num_sessions = a.sessions.value_or(o.num_sessions);
    o.num_turns = a.turns.value_or(o.num_turns);
    o.system_tokens = a.system_len.value_or(o.system_tokens);
    o.turn_input_tokens = a.input_len.value_or(o.turn_input_tokens);
    o.output_tokens = a.output_len.value_or(o.output_tokens);
    o.think_ms = a.think_ms.value_or(o.think_ms);
    o.session_interval_ms = a.session_interval_ms.value_or(o.session_interval_ms);
    o.session_prefix_tokens = a.session_prefix_len.value_or(o.session_prefix_tokens);
    o.num_chats = a.chats.value_or(o.num_chats);
    o.chat_input_tokens = a.chat_input_len.value_or(o.chat_input_tokens);
    o.chat_output_tokens = a.chat_output_len.value_or(o.chat_output_tokens);
    return make_sessions_workload(o);
  }
  TraceOptions o;
  o.time_scale = a.time_scale.value_or(o.time_scale);
  o.max_requests = a.max_requests.value_or(o.max_requests);
  o.block_tokens = a.trace_block_tokens.value_or(o.block_tokens);
  auto loaded = load_trace_workload(a.workload, o);
  if (!loaded) fail(kExitBadInput, loaded.error_message());
  return std::move(loaded).value();
}

ServerTarget make_target(const BenchServeArgs& a) {
  auto parsed = parse_base_url(a.base_url);
  if (!parsed) fail(kExitBadInput, parsed.error_message());
  ServerTarget target = std::move(parsed).value();
  target.api_key = a.api_key;
  target.endpoint = a.endpoint == "chat" ? Endpoint::kChat : Endpoint::kCompletions;
  if (a.prompt_format == "ids" && target.endpoint == Endpoint::kChat)
    fail(kExitBadInput, "--prompt-format ids needs --endpoint completions (chat messages are text)");
  target.prompt_format = a.prompt_format == "text" || target.endpoint == Endpoint::kChat ? PromptFormat::kText
                                                                                         : PromptFormat::kTokenIds;
  target.ignore_eos = a.ignore_eos;
  target.temperature = a.temperature;
  target.model = a.model;
  return target;
}

void run_bench_serve(const BenchServeArgs& a, CLI::App& cmd) {
  const std::string workload_kind =
      a.workload == "random" || a.workload == "burst" || a.workload == "sessions" ? a.workload : "trace";
  for (const std::string& flag : workload_shape_flags()) {
    if (cmd.get_option(flag)->count() > 0 && flags_read_by(workload_kind).count(flag) == 0)
      fail(kExitBadInput, flag + " has no effect with --workload " + a.workload);
  }
  if (a.token_id_min < 0 || a.token_id_min >= a.token_id_max)
    fail(kExitBadInput, "--token-id-min must be >= 0 and below --token-id-max");
  const Workload workload = make_workload(a);
  ServerTarget target = make_target(a);
  if (a.wait_for_server_s > 0) {
    if (auto healthy = wait_for_health(target, a.wait_for_server_s); !healthy)
      fail(kExitRunFailed, healthy.error_message());
  }
  if (target.model.empty()) {
    auto model = first_served_model(target);
    if (!model) fail(kExitRunFailed, model.error_message());
    target.model = std::move(model).value();
  }
  const std::string title = (a.label.empty() ? std::string() : a.label + ": ") + workload.description;
  std::fprintf(stderr, "sluice bench serve: %s against %s (model %s)\n", title.c_str(), a.base_url.c_str(),
               target.model.c_str());

  const RunOptions options{.tokens = {.min_token_id = a.token_id_min, .max_token_id = a.token_id_max, .seed = a.seed},
                           .max_concurrency = a.max_concurrency,
                           .server_speedup = a.server_speedup,
                           .max_duration_s = a.max_duration_s,
                           .show_progress = !a.no_progress && isatty(2) != 0};
  auto run = run_workload(target, workload, options);
  if (!run) fail(kExitRunFailed, run.error_message());
  const std::vector<RequestRecord>& records = run.value();
  const BenchSummary summary = summarize_run(records, a.slo);

  std::fputs(summary_table(title, summary, a.slo).c_str(), stdout);
  std::fflush(stdout);
  for (const RequestRecord& r : records) {
    if (r.status == RequestStatus::kFailed) {
      std::fprintf(stderr, "warning: %lld requests failed; the first: request %zu (%s): %s\n",
                   static_cast<long long>(summary.num_failed), r.index, r.label.c_str(), r.error.c_str());
      break;
    }
  }

  if (!a.output_json.empty()) {
    std::size_t num_token_times = 0;
    for (const RequestRecord& r : records) num_token_times += r.token_ms.size();
    const bool with_times = a.token_times || num_token_times <= kMaxAutoTokenTimes;
    const nlohmann::json report = {
        {"sluice_bench_report", 1},
        {"label", a.label},
        {"workload", workload.description},
        {"config",
         {{"base_url", a.base_url},
          {"model", target.model},
          {"endpoint", a.endpoint},
          {"prompt_format", target.prompt_format == PromptFormat::kTokenIds ? "ids" : "text"},
          {"workload", a.workload},
          {"seed", a.seed},
          {"ignore_eos", a.ignore_eos},
          {"max_concurrency", a.max_concurrency},
          {"server_speedup", a.server_speedup},
          {"max_duration_s", a.max_duration_s}}},
        {"summary", summary_json(summary, a.slo)},
        {"token_times_included", with_times},
        {"requests", records_json(records, with_times)}};
    if (auto written = write_file(a.output_json, report.dump(1) + "\n"); !written)
      fail(kExitRunFailed, written.error_message());
  }
  if (!a.plot.empty()) {
    if (auto written = write_file(a.plot, render_svg_plot(title, records, summary)); !written)
      fail(kExitRunFailed, written.error_message());
  }
}

void add_serve_subcommand(CLI::App& bench) {
  auto args = std::make_shared<BenchServeArgs>();
  auto& a = *args;
  CLI::App* cmd = bench.add_subcommand("serve", "load-test an OpenAI-compatible server (sluice or any other)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--base-url", a.base_url, "http://HOST:PORT of the server (a trailing /v1 is fine)");
  cmd->add_option("--model", a.model, "model name to request (default: the first of /v1/models)");
  cmd->add_option("--api-key", a.api_key, "sent as 'Authorization: Bearer KEY'");
  cmd->add_option("--endpoint", a.endpoint, "completions or chat")->check(CLI::IsMember({"completions", "chat"}));
  cmd->add_option("--prompt-format", a.prompt_format,
                  "auto (ids for completions, text for chat), ids (token-id arrays), text (one word per token)")
      ->check(CLI::IsMember({"auto", "ids", "text"}));
  cmd->add_option("--workload", a.workload, "random, burst, sessions, or a JSONL trace file");
  cmd->add_option("--seed", a.seed, "makes prompts, lengths and arrival times reproducible");
  cmd->add_option("--label", a.label, "a name for this run in the table, JSON and plot");
  cmd->add_flag("--ignore-eos,!--no-ignore-eos", a.ignore_eos,
                "send ignore_eos so every request generates exactly its output length");
  cmd->add_option("--temperature", a.temperature, "sampling temperature sent with every request")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--token-id-min", a.token_id_min, "prompt token ids are drawn from [min, max)");
  cmd->add_option("--token-id-max", a.token_id_max, "must not exceed the server's vocabulary");
  cmd->add_option("--max-concurrency", a.max_concurrency, "foreground requests in flight (0 = no limit)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--server-speedup", a.server_speedup,
                  "the server runs this many times faster than real time (serve --device sim --sim-speed S): "
                  "arrivals come S times sooner and times are reported x S")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-duration-s", a.max_duration_s, "cancel whatever still runs after this long, in server time (0 = no limit)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--wait-for-server-s", a.wait_for_server_s, "poll /health up to this long before starting")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--output-json", a.output_json, "write the full report (summary and every request) here");
  cmd->add_option("--plot", a.plot, "write an SVG plot of tokens over time per request here");
  cmd->add_flag("--no-progress", a.no_progress, "no progress bar (it only shows on a terminal anyway)");
  cmd->add_flag("--token-times", a.token_times, "keep every token's time in the JSON even for huge runs");

  cmd->add_option("--request-rate", a.request_rate, "random: Poisson arrivals per second (default: all at once)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-prompts", a.num_prompts, "random: requests (100); burst: long prompts (8)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--input-len", a.input_len, "random: prompt tokens (1024); sessions: new user tokens per turn (256)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", a.output_len, "output tokens per request (random, burst, sessions: 128)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--min-input-len", a.min_input_len, "burst: shortest long prompt (16384)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-input-len", a.max_input_len, "burst: longest long prompt (131072)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--burst-start-s", a.burst_start_s, "burst: the long prompts start this long after the chats (2)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--burst-window-s", a.burst_window_s, "burst: the long prompts arrive within this window (5)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--chats", a.chats, "burst, sessions: background chats decoding throughout (burst 8, sessions 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--chat-input-len", a.chat_input_len, "burst, sessions: chat prompt tokens (512)")->check(CLI::PositiveNumber);
  cmd->add_option("--chat-output-len", a.chat_output_len, "burst, sessions: chat output tokens (1024)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--sessions", a.sessions, "sessions: concurrent sessions (8)")->check(CLI::PositiveNumber);
  cmd->add_option("--turns", a.turns, "sessions: turns per session (4)")->check(CLI::PositiveNumber);
  cmd->add_option("--system-len", a.system_len, "sessions: shared system prompt tokens (2048)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--session-prefix-len", a.session_prefix_len,
                  "sessions: each session's own prefix after the system prompt, in tokens (0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--think-ms", a.think_ms, "sessions: pause between an answer and the next turn (1000)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--session-interval-ms", a.session_interval_ms, "sessions: start times apart (500)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--time-scale", a.time_scale, "trace: multiply arrival times (0.5 = twice as fast)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-requests", a.max_requests, "trace: the first N requests only")->check(CLI::PositiveNumber);
  cmd->add_option("--trace-block-tokens", a.trace_block_tokens, "trace: tokens per hash id (Mooncake: 512)")
      ->check(CLI::PositiveNumber);

  cmd->add_option("--slo-ttft-ms", a.slo.ttft_ms, "goodput: time to first token at most this")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--slo-tpot-ms", a.slo.tpot_ms, "goodput: mean time per output token at most this")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--slo-itl-ms", a.slo.itl_ms, "goodput: every gap between two tokens at most this")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--slo-e2e-ms", a.slo.e2e_ms, "goodput: end-to-end latency at most this")
      ->check(CLI::PositiveNumber);
  cmd->callback([args, cmd] { run_bench_serve(*args, *cmd); });
}

void add_compare_subcommand(CLI::App& bench) {
  struct CompareArgs {
    std::string reference, predicted, output_json;
  };
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "compare", "two `bench serve` JSON reports metric by metric: error = (predicted - reference) / reference");
  cmd->add_option("reference", args->reference, "the measured report (e.g. the real GPU)")->required();
  cmd->add_option("predicted", args->predicted, "the predicted report (e.g. serve --device sim)")->required();
  cmd->add_option("--output-json", args->output_json, "write the comparison here");
  cmd->callback([args] {
    auto load = [](const std::string& path) {
      auto text = read_file(path);
      if (!text) fail(kExitBadInput, text.error_message());
      auto json = nlohmann::json::parse(text.value(), nullptr, false);
      if (json.is_discarded()) fail(kExitBadInput, path + ": not JSON");
      return json;
    };
    auto rows = compare_reports(load(args->reference), load(args->predicted));
    if (!rows) fail(kExitBadInput, rows.error_message());
    std::fputs(comparison_table(rows.value()).c_str(), stdout);
    if (!args->output_json.empty())
      if (auto written = write_file(args->output_json, comparison_json(rows.value()).dump(1) + "\n"); !written)
        fail(kExitBadInput, written.error_message());
  });
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks against a running server");
  bench->require_subcommand(1);
  add_serve_subcommand(*bench);
  add_compare_subcommand(*bench);
}

}  // namespace sluice::cli
