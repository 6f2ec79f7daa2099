// Engine: the public face of sluice's inference loop. The server (and the CLI,
// and the scenario tests) include only this header: they build an
// EngineRequest, submit it, and read RequestOutput events from the returned
// RequestStream. Everything mutable (sequences, KV blocks, the scheduler's
// view) belongs to one engine thread; submit/abort/stats only queue work or
// read a snapshot, so any thread may call them.
//
// Two ways to run it:
//   - start(): a background thread loops schedule -> admit -> submit ->
//     collect -> stream (EngineCore::step) until stop(). Wall clock. With
//     EngineConfig::async_scheduling the backend runs each step on a worker
//     thread of its own while this one plans the next (step_pipeline.h).
//   - step(): the caller runs one step at a time on its own thread (do not
//     call start()). With EngineConfig::clock == kVirtual the engine's clock
//     advances by each StepOutput::step_time_ms, which makes runs on the sim
//     backend deterministic and fast (scenario tests, `sluice plan`).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/common/backend_info.h"
#include "sluice/common/ids.h"
#include "sluice/common/result.h"
#include "sluice/common/sampling_params.h"
#include "sluice/kv/eviction_policy.h"
#include "sluice/sched/cost_model.h"
#include "sluice/sched/scheduling_policy.h"

namespace sluice {

// The engine runs steps on a backend; its public header only names it, so the
// server and the structured-output layer never see backend types.
class Backend;

class TokenConstraint;  // engine/token_constraint.h
struct EngineRequestLimits;  // engine/request_validation.h

enum class DecodeLane {
  kOff,           // one step loop
  kStream,        // the decodes' lane on a stream of its own
  kHighPriority,  // ... at the device's highest stream priority
  kSms,           // ... on decode_lane_sms SMs of its own, the prefill lane on the others (green contexts)
};
// "off", "stream", "high-priority", or "sms:N".
std::string to_string(DecodeLane lane, std::int32_t num_sms = 0);
struct DecodeLaneSetting {
  DecodeLane lane = DecodeLane::kOff;
  std::int32_t num_sms = 0;
};
Result<DecodeLaneSetting> parse_decode_lane(std::string_view text);

enum class ClockMode {
  kWall,     // steady_clock; real backends
  kVirtual,  // advances by StepOutput::step_time_ms; the sim backend and deterministic tests
};

std::string_view to_string(SchedulingPolicy policy);
std::string_view to_string(EvictionPolicy policy);
// Parse the CLI/config spelling ("sluice", "fcfs", "round-robin", "prefill-first",
// "decode-first-token-budget"; "lru", "slru"). The error lists the valid names.
Result<SchedulingPolicy> parse_scheduling_policy(std::string_view name);
Result<EvictionPolicy> parse_eviction_policy(std::string_view name);

struct EngineConfig {
  std::int32_t max_num_seqs = 64;                 // running (admitted) requests at once
  std::int32_t max_num_batched_tokens = 8192;     // new tokens per step, all sequences together
  std::int32_t long_prefill_token_threshold = 0;  // per-request prefill chunk cap; 0 = none
  // Predicted-time bound of a step (ms). The scheduler sizes prefill chunks so
  // that decodes + chunks stay under it; by default the inter-token target.
  double max_step_ms = 50.0;
  // Share of each step's time that prefill keeps when decodes alone would
  // nearly fill max_step_ms (sched/sched_state.h, SchedConfig).
  double min_prefill_share = 0.25;
  // The longest predicted step that carries decodes (SchedConfig::max_token_gap_ms);
  // 0: 3 x max_step_ms.
  double max_token_gap_ms = 0.0;
  // Correct the cost model from each step's measured time (sched/online_cost_model.h),
  // so chunks are sized by what steps really cost, not by the prior's guess.
  bool online_cost_correction = true;
  std::int32_t max_model_len_tokens = 0;  // prompt + output; 0 = the backend's max_model_len_tokens
  bool enable_prefix_caching = true;
  EvictionPolicy eviction = EvictionPolicy::kSlru;
  double slru_protected_fraction = 0.5;  // share of the KV blocks the protected segment may hold
  // The host KV tier (kv/host_tier.h): bytes of host memory for KV blocks
  // (vLLM's --kv-offloading-size, in GiB there); 0 = none. Blocks the device
  // gives up are demoted there, and a prefix hit there is loaded back when
  // the planner prices that cheaper than recomputing.
  std::int64_t kv_offloading_bytes = 0;
  EvictionPolicy kv_offloading_eviction = EvictionPolicy::kLru;
  HostAdmission kv_offloading_admission;
  SchedulingPolicy scheduling = SchedulingPolicy::kSluice;
  // Shortest-remaining-first aging: a request that has waited aging_ms competes
  // as if its remaining prefill took half as long (a third after 2x, ...).
  double aging_ms = 30000.0;
  // Under sustained overload everybody ages; a prefill that has waited this
  // long goes ahead of every request that has not (in arrival order).
  double max_prefill_wait_ms = 120000.0;
  // Share of the KV blocks admission keeps free so running decodes can grow
  // without preempting anybody.
  double kv_reserve_fraction = 0.02;
  std::int32_t max_num_queued_requests = 4096;  // waiting requests; submit fails beyond
  std::int64_t max_num_queued_tokens = 0;       // prompt tokens waiting; 0 = unlimited
  // Plan and submit step N+1 while the backend runs step N (vLLM's
  // --async-scheduling): the engine thread's planning, stop checks and
  // streaming leave the backend's critical path. Stops are seen a step late
  // (a finished request's last step in flight is wasted work), a step waits
  // for the one in flight when its plan preempts, and structured-output
  // constraints are driven by the pipeline's worker.
  bool async_scheduling = false;
  // Two step loops (--decode-lane): every decode on a second lane of the
  // backend (Backend::make_lane), beside the prefill chunks on the first,
  // which are then sized by max_num_batched_tokens alone (docs/architecture.md,
  // "Decodes beside prefill"). Wall clock, without async scheduling.
  DecodeLane decode_lane = DecodeLane::kOff;
  std::int32_t decode_lane_sms = 0;  // kSms: the decode lane's SMs
  // The longest context a decode on the decode lane may have; a longer one
  // decodes in the prefill lane's steps (sched/decode_lane_bound.h says why).
  // 0: auto_decode_lane_max_context of the cost model.
  std::int32_t decode_lane_max_context = 0;
  // The least time from the start of one decode-lane step to the next: the
  // chats' inter-token target with two loops (0: back to back). A lane that
  // runs back to back gives the chats more tokens than the target and takes
  // HBM from the chunk beside it (S16-lead-4: a lane of 16 SMs back to back
  // cost an 8,192-row chunk 10%, paced at 50 ms 3%).
  double decode_lane_interval_ms = 0.0;
  ClockMode clock = ClockMode::kWall;
  // One JSON line per executed step (engine/step_trace.h), for calibrating the
  // cost model offline (`sluice calibrate`); empty = off.
  std::string step_trace_path;
};

// The decode lane's pace where serve and plan are not told one (the
// config's own default, 0, runs it back to back): 25 tok/s, over the 20 the
// chats are promised. Back to back the chats ran at 47-56 tok/s and took HBM
// from the chunks beside them (S16-lead-4: 10% of a chunk beside 16 SMs, 3%
// paced).
inline constexpr double kDefaultDecodeLaneIntervalMs = 40.0;
// The pace a flag asked for, else the default with a decode lane (0 without).
inline double decode_lane_interval_or_default(std::optional<double> asked, DecodeLane lane) {
  return asked.value_or(lane != DecodeLane::kOff ? kDefaultDecodeLaneIntervalMs : 0.0);
}

// Checks every field against the backend it will run on; the message names the
// field and the bound. The Engine constructor asserts it passed, so callers
// (CLI, server) validate first and report the error to the user.
Status validate(const EngineConfig& config, const BackendInfo& backend);
// The decode lane config.decode_lane asks for, made from `backend` (null when
// off); the error names the flag.
Result<std::unique_ptr<Backend>> make_decode_lane(Backend& backend, const EngineConfig& config);
// The longest context a decode on the decode lane may have: the config's, or
// (0) auto_decode_lane_max_context of the cost model (none: no bound), never
// past the engine's max_model_len.
std::int32_t decode_lane_max_context(const EngineConfig& config, const BackendInfo& backend,
                                     const CostModel* cost_model);

struct EngineRequest {
  std::string request_id;  // unique among live requests; abort() uses it
  std::vector<TokenId> prompt_token_ids;
  SamplingParams sampling;  // num_top_logprobs > 0 returns top logprobs per token
  // Generated tokens at most; finish reason kLength when reached. nullopt: the
  // rest of the context (max_model_len - prompt), as vLLM does.
  std::optional<std::int32_t> max_tokens;
  std::int32_t min_tokens = 0;   // stop/EOS ids are ignored before this many tokens
  std::vector<TokenId> stop_token_ids;  // finish reason kStop; the stop token is included in the output
  std::vector<TokenId> eos_token_ids;   // from the model's generation_config
  bool ignore_eos = false;
  // Mixed into every prefix-cache block hash: anything besides the token ids
  // that changes the KV content (a LoRA adapter, a cache salt for isolation).
  std::uint64_t cache_salt = 0;
  // Structured output (JSON mode): which tokens may come next. Used only on
  // the engine thread once submitted; null = unconstrained.
  std::shared_ptr<TokenConstraint> constraint;
};

enum class FinishReason { kStop, kLength, kAbort, kError };
std::string_view to_string(FinishReason reason);  // "stop", "length", "abort", "error"

struct GeneratedToken {
  TokenId token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;  // empty unless sampling.num_top_logprobs > 0
};

// What a consumer reads from a RequestStream: everything that happened since
// its previous read, coalesced. The last event has finish_reason set.
struct RequestOutput {
  std::vector<GeneratedToken> tokens;  // new tokens, in order
  std::optional<FinishReason> finish_reason;
  std::string error_message;            // set iff finish_reason == kError (or why an abort happened)
  std::optional<TokenId> stop_token;    // the stop/EOS id that ended it, if any
  std::int32_t num_prompt_tokens = 0;
  std::int32_t num_cached_tokens = 0;     // prompt tokens served from the prefix cache (usage.cached_tokens)
  std::int32_t num_generated_tokens = 0;  // total so far, including these

  bool finished() const { return finish_reason.has_value(); }
};

// One request's output channel. The engine thread pushes; one consumer reads.
// Thread-safe. For an asynchronous server: set_on_ready() with a callback that
// posts to the server's executor, and call poll() from there; nothing busy-waits.
class RequestStream {
 public:
  explicit RequestStream(std::string request_id);
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  const std::string& request_id() const { return request_id_; }

  // Takes everything pending, or nullopt if nothing is.
  std::optional<RequestOutput> poll();
  // Blocks until something is pending (or timeout); then as poll().
  std::optional<RequestOutput> wait(std::chrono::milliseconds timeout);
  // Called (on the engine thread, without the stream's lock held) each time
  // output becomes pending. It must be cheap and must not call into the Engine
  // synchronously; posting a handler that calls poll() is the intended use.
  // If output is already pending when it is set, it is called right away on
  // the caller's thread.
  void set_on_ready(std::function<void()> on_ready);
  // True once the final event has been pushed (it may not have been read yet).
  bool finished() const;

  // Engine side.
  void push(RequestOutput output);

 private:
  struct State;
  const std::string request_id_;
  std::shared_ptr<State> state_;
};

// A snapshot for /metrics and the periodic log line.
struct EngineStats {
  double now_ms = 0.0;
  std::int32_t num_running = 0;
  std::int32_t num_waiting = 0;
  std::int64_t num_queued_prompt_tokens = 0;
  std::int32_t num_kv_blocks = 0;
  std::int32_t num_free_kv_blocks = 0;    // unused, cached or not
  std::int32_t num_cached_free_kv_blocks = 0;  // unused but still holding a reusable prefix
  double kv_usage = 0.0;                  // used / total, in [0, 1]
  std::int64_t prefix_cache_queried_tokens = 0;
  std::int64_t prefix_cache_hit_tokens = 0;
  std::int64_t prefix_cache_evicted_blocks = 0;
  // Prompts (admissions) whose prefix came partly from each tier.
  std::int64_t prefix_cache_device_hit_queries = 0;
  std::int64_t prefix_cache_host_hit_queries = 0;
  // The host tier (all 0 without one). queried: prompt tokens the device
  // missed; hit: tokens loaded from the host instead of recomputed.
  std::int32_t num_host_kv_blocks = 0;
  std::int32_t num_host_stored_kv_blocks = 0;
  std::int64_t host_cache_queried_tokens = 0;
  std::int64_t host_cache_hit_tokens = 0;
  std::int64_t host_loaded_blocks = 0;   // loads started
  std::int64_t host_stored_blocks = 0;   // stores completed
  std::int64_t host_evicted_blocks = 0;
  std::int64_t host_loaded_bytes = 0;
  std::int64_t host_stored_bytes = 0;
  std::int64_t host_failed_copies = 0;
  std::int64_t host_demotions_skipped = 0;  // device keys evicted without a store (admission, or no time)
  // Of those, evicted directly by allocation (KvCacheCounters: by an
  // admission, by a running sequence's growth, while demotions were in flight).
  std::int64_t host_evicted_past_admitting = 0;
  std::int64_t host_evicted_past_growing = 0;
  std::int64_t host_evicted_past_while_demoting = 0;
  std::int64_t host_num_loads = 0;          // requests whose prefix load completed
  // Host-tier tokens an admission found but recomputed (the planner priced
  // them cheaper to compute, or the step's copy budget was spent).
  std::int64_t host_hit_tokens_recomputed = 0;
  double host_load_ms_total = 0.0;          // from admission to the last load's completion, summed
  std::int32_t num_kv_copies_in_flight = 0;
  std::int64_t num_steps = 0;
  double last_step_ms = 0.0;
  double max_step_ms_seen = 0.0;
  double total_step_ms = 0.0;
  std::int64_t num_prompt_tokens_computed = 0;  // prefill tokens actually run
  std::int64_t num_generated_tokens = 0;
  std::int64_t num_preemptions = 0;
  std::int64_t num_swap_preemptions = 0;     // of those, swapped to the host tier
  std::int64_t host_swapped_out_blocks = 0;  // stores the swaps started
  std::int64_t num_requests_finished = 0;  // stop or length
  std::int64_t num_requests_aborted = 0;
  std::int64_t num_requests_failed = 0;
  // Async scheduling: sequence-steps whose request ended while they were in
  // flight (a stop is seen a step late: this is the work it costs), and steps
  // that had to wait for the one in flight before planning (a preemption).
  std::int64_t num_dropped_sequence_steps = 0;
  std::int64_t num_pipeline_waits = 0;
  // Steps planned past --max-step-ms beside decodes to amortize a chunk's
  // fixed cost (SchedConfig::max_token_gap_ms), each paid back by the steps after.
  std::int64_t num_long_steps = 0;
  // --decode-lane: of num_steps, those the decode lane ran, the decode-only
  // steps the main lane ran (it had nothing to prefill), and those (either
  // lane's) submitted while the other lane had a step in flight.
  std::int64_t num_decode_lane_steps = 0;
  std::int64_t num_main_lane_decode_steps = 0;
  std::int64_t num_steps_beside_other_lane = 0;
  // Measured over predicted, per cost term (CostTerms order: gemm compute,
  // gemm memory, attention compute, attention memory, fixed); all 1 while the
  // online correction is off or has seen nothing.
  std::array<double, CostTerms::kNumTerms> cost_correction_factors = {1, 1, 1, 1, 1};
  // Longest time since its previous token of any request now decoding: the
  // number that says whether decode is starving.
  // Evaluated when stats() is read, so a step that runs for seconds shows up
  // while it runs (a snapshot taken as a step ends would always read ~0).
  double longest_current_decode_stall_ms = 0.0;
  double oldest_decode_token_ms = -1.0;  // engine clock of the stalest decoding request's last token; -1: none
};

// When each thing happened to one request, on the engine's clock (ms).
struct RequestTimeline {
  struct Chunk {
    double start_ms = 0.0;  // start of the step that ran it
    double end_ms = 0.0;
    std::int32_t num_computed_tokens = 0;  // position it started at
    std::int32_t num_tokens = 0;
  };
  std::string request_id;
  std::int32_t num_prompt_tokens = 0;
  std::int32_t num_cached_tokens = 0;
  double arrival_ms = 0.0;
  std::optional<double> admitted_ms;
  std::vector<Chunk> prefill_chunks;
  std::optional<double> first_token_ms;
  std::vector<double> token_ms;  // end of the step that produced each generated token
  std::optional<double> finish_ms;
  std::optional<FinishReason> finish_reason;
  std::int32_t num_preemptions = 0;
};

// What one step did, for tests and tracing.
// One step() call, described by the step it collected last (with async
// scheduling, the step submitted the call before).
struct StepReport {
  double start_ms = 0.0;             // when the step began running
  double end_ms = 0.0;               // when it ended (the call's start if nothing was collected)
  double step_ms = 0.0;              // measured, or the sim backend's predicted time
  double predicted_step_ms = 0.0;    // the scheduler's prediction
  std::int32_t num_decode_seqs = 0;
  std::int32_t num_prefill_seqs = 0;
  std::int64_t num_prefill_tokens = 0;
  std::int32_t num_preempted = 0;
  bool idle = true;  // nothing was runnable
};

class Engine {
 public:
  // cost_model sizes prefill chunks; nullptr uses a token-count fallback
  // (fine for the CPU backend, where max_step_ms is loose anyway).
  // Asserts validate(config, backend->info()) passed.
  // decode_lane: make_decode_lane's (null exactly when config.decode_lane is kOff).
  Engine(std::unique_ptr<Backend> backend, std::shared_ptr<const CostModel> cost_model,
         EngineConfig config, std::unique_ptr<Backend> decode_lane = nullptr);
  ~Engine();  // stop(kAbort) if running
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Rejects, with a message for the client and a code for the server:
  // whatever check_request (request_validation.h) rejects (kInvalidArgument,
  // kOutOfRange), a request id already in use (kInvalidArgument), a full queue
  // (kResourceExhausted), an engine that is stopping or dead (kUnavailable,
  // naming the failure). Thread-safe.
  Result<std::shared_ptr<RequestStream>> submit(EngineRequest request);
  // Finishes the request with kAbort and frees its blocks at the next step.
  // Unknown or finished ids are ignored. Thread-safe.
  void abort(const std::string& request_id);

  void start();
  enum class StopMode { kDrain, kAbort };
  // kDrain: refuse new submits, finish what is queued and running, then stop.
  // kAbort: abort everything now. Blocks until the thread has exited.
  void stop(StopMode mode = StopMode::kDrain);

  // Synchronous mode (no start()): runs one step on the caller's thread.
  StepReport step();
  // True while anything is waiting, running, or queued for submission/abort.
  bool has_work() const;
  // Virtual clock only: moves time forward to `time_ms` if it is later (an
  // idle gap before the next arrival in a simulated workload).
  void advance_clock_to(double time_ms);
  double now_ms() const;

  // Why the engine is dead, or nothing while it runs. The backend reported a
  // failure it cannot recover from (Backend::fatal_error: a rank of its
  // tensor-parallel group failed): from that step on every request ends with
  // kError and that reason, and submit refuses with kUnavailable. The server
  // answers /health with 503 then, as vLLM does on EngineDeadError. There is
  // no way back: restart the process. Thread-safe.
  std::optional<std::string> fatal_error() const;

  EngineStats stats() const;  // thread-safe snapshot
  // Timelines of requests that ended since the previous call, in the order
  // they ended. Thread-safe.
  std::vector<RequestTimeline> take_finished_timelines();

  const EngineConfig& config() const;
  const BackendInfo& backend_info() const;
  // What submit accepts: check_request against these gives its answer.
  const EngineRequestLimits& request_limits() const;

  // Aborts with the location if any internal invariant is broken (block
  // references vs block tables, queue states, length relations). For tests.
  void check_invariants() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
