// Workloads: what to send and when. Every generator is a pure function of its
// options (seed included), so a run is reproducible and testable without a
// server.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "sluice/common/result.h"
#include "sluice/loadgen/prompt_source.h"

namespace sluice::loadgen {

// Foreground requests are the workload proper: the run ends when they have all
// finished. Background requests (the burst's chats) keep decoding alongside
// and are cancelled then.
enum class RequestRole { kForeground, kBackground };

struct PlannedRequest {
  std::string label;  // "random", "burst", "chat", "session 3 turn 2", "trace"
  RequestRole role = RequestRole::kForeground;
  // Milliseconds from the start of the run, or, for a follow-up, after the
  // request `follows` has finished (a session's next turn after think time).
  double arrival_ms = 0;
  std::optional<std::size_t> follows;  // index into Workload::requests, always an earlier one
  PromptSpec prompt;
  std::int32_t max_output_tokens = 0;
};

// Closed-loop chats: `num_streams` requests in flight from the start; when one
// completes, the next starts, until every foreground request has finished (a
// chat that fails is not replaced).
struct BackgroundChats {
  std::int32_t num_streams = 0;
  std::int32_t input_tokens = 0;
  std::int32_t output_tokens = 0;
  std::uint64_t key_base = 0;  // the n-th chat's prompt is segment key_base + n

  PlannedRequest nth(std::int64_t n) const;
};

struct Workload {
  std::string description;
  std::vector<PlannedRequest> requests;
  BackgroundChats background;
};

inline constexpr double kUnlimitedRate = std::numeric_limits<double>::infinity();

struct RandomWorkloadOptions {
  std::int32_t num_prompts = 100;
  std::int32_t input_tokens = 1024;
  std::int32_t output_tokens = 128;
  double request_rate_per_s = kUnlimitedRate;  // Poisson arrivals; infinity: all at t = 0
  std::uint64_t seed = 0;
};
Workload make_random_workload(const RandomWorkloadOptions& options);

// The user report scaled to one GPU: background chats decode while
// `num_prompts` long prompts (lengths uniform in [min, max]) arrive at uniform
// random times within `window_ms`, starting `start_ms` after the chats.
struct BurstWorkloadOptions {
  std::int32_t num_prompts = 8;
  std::int32_t min_input_tokens = 16384;
  std::int32_t max_input_tokens = 131072;
  std::int32_t output_tokens = 128;
  double start_ms = 2000;
  double window_ms = 5000;
  std::int32_t num_chats = 8;
  std::int32_t chat_input_tokens = 512;
  std::int32_t chat_output_tokens = 1024;
  std::uint64_t seed = 0;
};
Workload make_burst_workload(const BurstWorkloadOptions& options);

// Multi-turn sessions: every prompt starts with one system prompt shared by
// all sessions, then the session's own prefix (a document, a codebase:
// session_prefix_tokens, none by default); turn k+1 repeats turn k's prompt, a
// stand-in for its answer (output_tokens long) and a new user message, and is
// sent think_ms after turn k finished. Sessions start session_interval_ms
// apart. num_chats background chats decode throughout (as the burst's do).
struct SessionsWorkloadOptions {
  std::int32_t num_sessions = 8;
  std::int32_t num_turns = 4;
  std::int32_t system_tokens = 2048;
  std::int32_t session_prefix_tokens = 0;
  std::int32_t turn_input_tokens = 256;
  std::int32_t output_tokens = 128;
  double think_ms = 1000;
  double session_interval_ms = 500;
  std::int32_t num_chats = 0;
  std::int32_t chat_input_tokens = 512;
  std::int32_t chat_output_tokens = 1024;
  std::uint64_t seed = 0;
};
Workload make_sessions_workload(const SessionsWorkloadOptions& options);

// A JSONL trace, one request per line. Accepted fields:
//   arrival: "timestamp" or "arrival_ms" (ms from the start; default 0);
//   prompt:  "prompt" (text), or "hash_ids" + "input_length" (Mooncake: each
//            hash id a deterministic block of block_tokens tokens, so equal ids
//            are a real shared prefix), or "input_length" / "prompt_tokens";
//   output:  "output_length" / "max_tokens" / "output_tokens".
struct TraceOptions {
  double time_scale = 1.0;        // arrival times are multiplied by this (0.5: twice as fast)
  std::int64_t max_requests = 0;  // 0: every line
  std::int32_t block_tokens = 512;
};
Result<Workload> parse_trace_workload(const std::string& jsonl, const std::string& name, const TraceOptions& options);
Result<Workload> load_trace_workload(const std::string& path, const TraceOptions& options);

}  // namespace sluice::loadgen
