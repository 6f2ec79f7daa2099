#include "sluice/loadgen/workload.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sluice/common/io.h"
#include "sluice/common/rng.h"

namespace sluice::loadgen {
namespace {

// Segment keys: the kind of content in the top byte, so no two kinds collide.
enum class KeyKind : std::uint64_t {
  kRandom = 1,
  kBurst = 2,
  kChat = 3,
  kSystem = 4,
  kSessionUser = 5,
  kSessionAnswer = 6,
  kTraceBlock = 7,
  kTraceTail = 8,
  kSessionPrefix = 9,
};

constexpr std::uint64_t key(KeyKind kind, std::uint64_t index) {
  return (static_cast<std::uint64_t>(kind) << 56) | (index & ((1ULL << 56) - 1));
}

constexpr std::uint64_t session_key(KeyKind kind, std::int64_t session, std::int64_t turn) {
  return key(kind, (static_cast<std::uint64_t>(session) << 24) | static_cast<std::uint64_t>(turn));
}

PromptSpec single_segment(std::uint64_t segment_key, std::int32_t num_tokens) {
  return PromptSpec{.segments = {PromptSegment{.key = segment_key, .num_tokens = num_tokens}}};
}

}  // namespace

PlannedRequest BackgroundChats::nth(std::int64_t n) const {
  return PlannedRequest{.label = "chat",
                        .role = RequestRole::kBackground,
                        .prompt = single_segment(key(KeyKind::kChat, key_base + static_cast<std::uint64_t>(n)),
                                                 input_tokens),
                        .max_output_tokens = output_tokens};
}

Workload make_random_workload(const RandomWorkloadOptions& o) {
  Workload w;
  w.description = fmt::format("random: {} prompts of {} tokens, {} output tokens, {}", o.num_prompts,
                              o.input_tokens, o.output_tokens,
                              std::isinf(o.request_rate_per_s) ? std::string("all at once")
                                                               : fmt::format("{} req/s (Poisson)", o.request_rate_per_s));
  double t_ms = 0;
  for (std::int32_t i = 0; i < o.num_prompts; ++i) {
    if (!std::isinf(o.request_rate_per_s) && i > 0) {
      // Exponential inter-arrival times; 1 - u is in (0, 1], so the log is finite.
      const double u = uniform_from(o.seed ^ 0x5eedULL, static_cast<std::uint64_t>(i));
      t_ms += -std::log(1.0 - u) / o.request_rate_per_s * 1000.0;
    }
    w.requests.push_back({.label = "random",
                          .arrival_ms = t_ms,
                          .prompt = single_segment(key(KeyKind::kRandom, static_cast<std::uint64_t>(i)), o.input_tokens),
                          .max_output_tokens = o.output_tokens});
  }
  return w;
}

Workload make_burst_workload(const BurstWorkloadOptions& o) {
  Workload w;
  w.description = fmt::format(
      "burst: {} prompts of {}-{} tokens ({} output) arriving within {:.1f} s from t = {:.1f} s, while {} chats "
      "({} in, {} out) decode",
      o.num_prompts, o.min_input_tokens, o.max_input_tokens, o.output_tokens, o.window_ms / 1000.0,
      o.start_ms / 1000.0, o.num_chats, o.chat_input_tokens, o.chat_output_tokens);
  for (std::int32_t i = 0; i < o.num_prompts; ++i) {
    const auto index = static_cast<std::uint64_t>(i);
    const double u_len = uniform_from(o.seed ^ 0xb0257ULL, 2 * index);
    const double u_time = uniform_from(o.seed ^ 0xb0257ULL, 2 * index + 1);
    const auto span = static_cast<double>(o.max_input_tokens - o.min_input_tokens + 1);
    const auto length = std::min(o.max_input_tokens,
                                 o.min_input_tokens + static_cast<std::int32_t>(u_len * span));
    w.requests.push_back({.label = "burst",
                          .arrival_ms = o.start_ms + u_time * o.window_ms,
                          .prompt = single_segment(key(KeyKind::kBurst, index), length),
                          .max_output_tokens = o.output_tokens});
  }
  std::stable_sort(w.requests.begin(), w.requests.end(),
                   [](const PlannedRequest& a, const PlannedRequest& b) { return a.arrival_ms < b.arrival_ms; });
  w.background = {.num_streams = o.num_chats,
                  .input_tokens = o.chat_input_tokens,
                  .output_tokens = o.chat_output_tokens,
                  .key_base = o.seed * 1000003ULL};
  return w;
}

Workload make_sessions_workload(const SessionsWorkloadOptions& o) {
  Workload w;
  w.description = fmt::format(
      "sessions: {} sessions x {} turns, shared system prompt {} tokens, +{} user tokens and {} output tokens per "
      "turn, {} ms think time",
      o.num_sessions, o.num_turns, o.system_tokens, o.turn_input_tokens, o.output_tokens, o.think_ms);
  if (o.session_prefix_tokens > 0) w.description += fmt::format(", {} own prefix tokens per session", o.session_prefix_tokens);
  if (o.num_chats > 0)
    w.description += fmt::format(", while {} chats ({} in, {} out) decode", o.num_chats, o.chat_input_tokens,
                                 o.chat_output_tokens);
  for (std::int32_t s = 0; s < o.num_sessions; ++s) {
    PromptSpec history = single_segment(key(KeyKind::kSystem, o.seed), o.system_tokens);
    if (o.session_prefix_tokens > 0)
      history.segments.push_back({.key = session_key(KeyKind::kSessionPrefix, s, 0), .num_tokens = o.session_prefix_tokens});
    for (std::int32_t t = 0; t < o.num_turns; ++t) {
      if (t > 0)
        history.segments.push_back({.key = session_key(KeyKind::kSessionAnswer, s, t - 1), .num_tokens = o.output_tokens});
      history.segments.push_back({.key = session_key(KeyKind::kSessionUser, s, t), .num_tokens = o.turn_input_tokens});
      PlannedRequest request{.label = fmt::format("session {} turn {}", s, t),
                             .arrival_ms = t == 0 ? s * o.session_interval_ms : o.think_ms,
                             .prompt = history,
                             .max_output_tokens = o.output_tokens};
      if (t > 0) request.follows = w.requests.size() - 1;
      w.requests.push_back(std::move(request));
    }
  }
  w.background = {.num_streams = o.num_chats,
                  .input_tokens = o.chat_input_tokens,
                  .output_tokens = o.chat_output_tokens,
                  .key_base = o.seed * 1000003ULL};
  return w;
}

Result<Workload> parse_trace_workload(const std::string& jsonl, const std::string& name, const TraceOptions& o) {
  Workload w;
  std::istringstream lines(jsonl);
  std::string line;
  std::int64_t line_number = 0;
  auto integer = [](const nlohmann::json& j, std::initializer_list<const char*> keys) -> std::optional<std::int64_t> {
    for (const char* k : keys)
      if (auto it = j.find(k); it != j.end() && it->is_number()) return it->get<std::int64_t>();
    return std::nullopt;
  };
  while (std::getline(lines, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (o.max_requests > 0 && static_cast<std::int64_t>(w.requests.size()) >= o.max_requests) break;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    const std::string where = fmt::format("{}:{}", name, line_number);
    if (j.is_discarded() || !j.is_object()) return Error{where + ": not a JSON object"};
    PlannedRequest request{.label = "trace"};
    const double arrival_ms = j.contains("arrival_ms") && j["arrival_ms"].is_number() ? j["arrival_ms"].get<double>()
                              : j.contains("timestamp") && j["timestamp"].is_number() ? j["timestamp"].get<double>()
                                                                                       : 0.0;
    if (arrival_ms < 0) return Error{where + ": negative arrival time"};
    request.arrival_ms = arrival_ms * o.time_scale;
    const auto output = integer(j, {"output_length", "max_tokens", "output_tokens"});
    if (!output || *output < 1 || *output > (1 << 30))
      return Error{where + ": needs a positive output_length (or max_tokens)"};
    request.max_output_tokens = static_cast<std::int32_t>(*output);
    const auto input = integer(j, {"input_length", "prompt_tokens"});
    if (j.contains("prompt") && j["prompt"].is_string() && !j["prompt"].get_ref<const std::string&>().empty()) {
      request.prompt.literal_text = j["prompt"].get<std::string>();
    } else if (input && *input > 0 && *input <= (1 << 30)) {
      const auto num_tokens = static_cast<std::int32_t>(*input);
      std::int32_t covered = 0;
      if (const auto ids = j.find("hash_ids"); ids != j.end() && ids->is_array()) {
        for (const auto& id : *ids) {
          if (!id.is_number_integer() || id.get<std::int64_t>() < 0) return Error{where + ": hash_ids must be non-negative integers"};
          if (covered >= num_tokens) break;
          const std::int32_t n = std::min(o.block_tokens, num_tokens - covered);
          request.prompt.segments.push_back({.key = key(KeyKind::kTraceBlock, id.get<std::uint64_t>()), .num_tokens = n});
          covered += n;
        }
      }
      // Tokens beyond the listed blocks belong to this request alone.
      if (covered < num_tokens)
        request.prompt.segments.push_back(
            {.key = key(KeyKind::kTraceTail, static_cast<std::uint64_t>(line_number)), .num_tokens = num_tokens - covered});
    } else {
      return Error{where + ": needs a non-empty prompt or a positive input_length"};
    }
    w.requests.push_back(std::move(request));
  }
  if (w.requests.empty()) return Error{name + ": no requests"};
  std::stable_sort(w.requests.begin(), w.requests.end(),
                   [](const PlannedRequest& a, const PlannedRequest& b) { return a.arrival_ms < b.arrival_ms; });
  w.description = fmt::format("trace {}: {} requests, time scale {}", name, w.requests.size(), o.time_scale);
  return w;
}

Result<Workload> load_trace_workload(const std::string& path, const TraceOptions& options) {
  SLUICE_TRY_ASSIGN(text, read_file(path));
  return parse_trace_workload(text, path, options);
}

}  // namespace sluice::loadgen
