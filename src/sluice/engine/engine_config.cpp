// Names and validation of the engine's settings. Every bound is checked here,
// once, with a message naming the flag, so a bad setting fails at start.
#include <algorithm>
#include <string>

#include "sluice/backend/backend.h"
#include "sluice/engine/engine.h"
#include "sluice/engine/step_trace.h"
#include "sluice/sched/decode_lane_bound.h"

namespace sluice {
namespace {

struct PolicyName {
  SchedulingPolicy policy;
  std::string_view name;
};
constexpr PolicyName kPolicyNames[] = {
    {SchedulingPolicy::kSluice, "sluice"},
    {SchedulingPolicy::kFcfs, "fcfs"},
    {SchedulingPolicy::kRoundRobin, "round-robin"},
    {SchedulingPolicy::kPrefillFirst, "prefill-first"},
    {SchedulingPolicy::kDecodeFirstTokenBudget, "decode-first-token-budget"},
};

Status bad(const std::string& message) { return Error{"invalid engine setting: " + message}; }

}  // namespace

std::string_view to_string(SchedulingPolicy policy) {
  for (const PolicyName& p : kPolicyNames) {
    if (p.policy == policy) return p.name;
  }
  return "?";
}

std::string_view to_string(EvictionPolicy policy) {
  switch (policy) {
    case EvictionPolicy::kLru: return "lru";
    case EvictionPolicy::kSlru: return "slru";
    case EvictionPolicy::kPrefixAware: return "prefix-aware";
    case EvictionPolicy::kReuseHistory: return "reuse-history";
    case EvictionPolicy::kAdaptiveReuse: return "adaptive-reuse";
  }
  return "?";
}

std::string to_string(DecodeLane lane, std::int32_t num_sms) {
  switch (lane) {
    case DecodeLane::kOff: return "off";
    case DecodeLane::kStream: return "stream";
    case DecodeLane::kHighPriority: return "high-priority";
    case DecodeLane::kSms: return "sms:" + std::to_string(num_sms);
  }
  return "?";
}

Result<DecodeLaneSetting> parse_decode_lane(std::string_view text) {
  for (const DecodeLane lane : {DecodeLane::kOff, DecodeLane::kStream, DecodeLane::kHighPriority})
    if (to_string(lane) == text) return DecodeLaneSetting{.lane = lane};
  if (text.starts_with("sms:")) {
    const std::string digits(text.substr(4));
    if (!digits.empty() && digits.size() < 5 && digits.find_first_not_of("0123456789") == std::string::npos &&
        std::stoi(digits) > 0)
      return DecodeLaneSetting{.lane = DecodeLane::kSms, .num_sms = std::stoi(digits)};
  }
  return Error{"--decode-lane: '" + std::string(text) + "' is not off, stream, high-priority or sms:N (N > 0)"};
}

std::int32_t decode_lane_max_context(const EngineConfig& config, const BackendInfo& backend,
                                     const CostModel* cost_model) {
  const std::int32_t max_len =
      std::max(1, config.max_model_len_tokens > 0 ? config.max_model_len_tokens : backend.max_model_len_tokens);
  if (config.decode_lane_max_context > 0) return std::min(config.decode_lane_max_context, max_len);
  return cost_model != nullptr ? auto_decode_lane_max_context(*cost_model, max_len) : max_len;
}

Result<std::unique_ptr<Backend>> make_decode_lane(Backend& backend, const EngineConfig& config) {
  if (config.decode_lane == DecodeLane::kOff) return std::unique_ptr<Backend>();
  auto lane = backend.make_lane({.high_priority = config.decode_lane == DecodeLane::kHighPriority,
                                 .num_sms = config.decode_lane == DecodeLane::kSms ? config.decode_lane_sms : 0,
                                 .step_interval_ms = config.decode_lane_interval_ms});
  if (!lane.ok())
    return Error{"--decode-lane " + to_string(config.decode_lane, config.decode_lane_sms) + ": " + lane.error_message()};
  return lane;
}

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

Result<SchedulingPolicy> parse_scheduling_policy(std::string_view name) {
  std::string valid;
  for (const PolicyName& p : kPolicyNames) {
    if (p.name == name) return p.policy;
    valid += (valid.empty() ? "" : ", ") + std::string(p.name);
  }
  return Error{"unknown scheduling policy '" + std::string(name) + "' (valid: " + valid + ")"};
}

Result<EvictionPolicy> parse_eviction_policy(std::string_view name) {
  if (name == "lru") return EvictionPolicy::kLru;
  if (name == "slru") return EvictionPolicy::kSlru;
  if (name == "prefix-aware") return EvictionPolicy::kPrefixAware;
  if (name == "reuse-history") return EvictionPolicy::kReuseHistory;
  if (name == "adaptive-reuse") return EvictionPolicy::kAdaptiveReuse;
  return Error{"unknown eviction policy '" + std::string(name) +
               "' (valid: lru, slru, prefix-aware, reuse-history, adaptive-reuse)"};
}

Status validate(const EngineConfig& c, const BackendInfo& backend) {
  if (c.max_num_seqs < 1) return bad("--max-num-seqs must be >= 1, got " + std::to_string(c.max_num_seqs));
  if (c.max_num_batched_tokens < 1) {
    return bad("--max-num-batched-tokens must be >= 1, got " + std::to_string(c.max_num_batched_tokens));
  }
  if (c.max_num_batched_tokens < c.max_num_seqs) {
    return bad("--max-num-batched-tokens (" + std::to_string(c.max_num_batched_tokens) +
               ") must be >= --max-num-seqs (" + std::to_string(c.max_num_seqs) + ") so every decode fits a step");
  }
  if (c.long_prefill_token_threshold < 0) {
    return bad("--long-prefill-token-threshold must be >= 0 (0 = off), got " +
               std::to_string(c.long_prefill_token_threshold));
  }
  if (!(c.max_step_ms > 0.0)) return bad("--max-step-ms must be > 0, got " + std::to_string(c.max_step_ms));
  if (!(c.min_prefill_share >= 0.0 && c.min_prefill_share < 1.0))
    return bad("--min-prefill-share must be in [0, 1), got " + std::to_string(c.min_prefill_share));
  if (!(c.max_token_gap_ms == 0.0 || c.max_token_gap_ms >= c.max_step_ms)) {
    return bad("--max-token-gap-ms must be 0 (3 x --max-step-ms) or >= --max-step-ms (" +
               std::to_string(c.max_step_ms) + "), got " + std::to_string(c.max_token_gap_ms));
  }
  if (c.max_model_len_tokens < 0) return bad("--max-model-len must be >= 0 (0 = the model's)");
  if (backend.max_model_len_tokens > 0 && c.max_model_len_tokens > backend.max_model_len_tokens) {
    return bad("--max-model-len " + std::to_string(c.max_model_len_tokens) + " exceeds the backend's " +
               std::to_string(backend.max_model_len_tokens));
  }
  if (c.max_model_len_tokens == 0 && backend.max_model_len_tokens <= 0) {
    return bad("--max-model-len is required: the backend does not state one");
  }
  if (!(c.slru_protected_fraction >= 0.0 && c.slru_protected_fraction <= 1.0)) {
    return bad("slru protected fraction must be in [0, 1], got " + std::to_string(c.slru_protected_fraction));
  }
  if (!(c.aging_ms > 0.0)) return bad("aging must be > 0 ms, got " + std::to_string(c.aging_ms));
  if (!(c.max_prefill_wait_ms > 0.0)) {
    return bad("max prefill wait must be > 0 ms, got " + std::to_string(c.max_prefill_wait_ms));
  }
  if (!(c.kv_reserve_fraction >= 0.0 && c.kv_reserve_fraction < 1.0)) {
    return bad("KV reserve fraction must be in [0, 1), got " + std::to_string(c.kv_reserve_fraction));
  }
  if (c.max_num_queued_requests < 1) return bad("--max-num-queued-requests must be >= 1");
  if (c.max_num_queued_tokens < 0) return bad("--max-num-queued-tokens must be >= 0 (0 = unlimited)");
  if (c.kv_offloading_bytes < 0) return bad("--kv-offloading-size must be >= 0 (0 = no host KV tier)");
  if (c.kv_offloading_bytes > 0) {
    if (backend.kv_bytes_per_block <= 0) {
      return bad("--kv-offloading-size: the " + backend.name + " backend has no host KV tier");
    }
    const std::int64_t num_blocks = c.kv_offloading_bytes / backend.kv_bytes_per_block;
    if (num_blocks < 1 || num_blocks > (1LL << 30)) {
      return bad("--kv-offloading-size gives " + std::to_string(num_blocks) + " host blocks of " +
                 std::to_string(backend.kv_bytes_per_block) + " bytes; it must give 1 to 2^30");
    }
  }
  if (c.kv_offloading_admission.min_hits < 0) return bad("--kv-offloading-min-hits must be >= 0");
  if ((c.decode_lane == DecodeLane::kSms) != (c.decode_lane_sms > 0))
    return bad("--decode-lane sms:N needs N > 0, and N only goes with sms");
  if (c.decode_lane_max_context < 0) return bad("--decode-lane-max-context must be >= 0 (0 = from the cost model)");
  if (c.decode_lane == DecodeLane::kOff && c.decode_lane_max_context > 0)
    return bad("--decode-lane-max-context bounds the decode lane's contexts: it needs --decode-lane");
  if (!(c.decode_lane_interval_ms >= 0.0) || c.decode_lane_interval_ms > 10000.0)
    return bad("--decode-lane-interval-ms must be in [0, 10000] (0 = back to back)");
  if (c.decode_lane == DecodeLane::kOff && c.decode_lane_interval_ms > 0.0)
    return bad("--decode-lane-interval-ms paces the decode lane's steps: it needs --decode-lane");
  if (c.decode_lane != DecodeLane::kOff && c.async_scheduling)
    return bad("--decode-lane runs each lane's step to its end before planning the lane's next: it does not "
               "combine with --async-scheduling");
  if (c.kv_offloading_eviction == EvictionPolicy::kPrefixAware) {
    return bad("--kv-offloading-eviction: the host KV tier evicts lru, slru, reuse-history or adaptive-reuse "
               "(prefix-aware ranks device blocks by the request that freed them)");
  }
  if (backend.block_size_tokens < 1) return bad("backend block size must be >= 1");
  if (backend.num_kv_blocks < 1) return bad("the backend has no KV blocks (the model does not fit?)");
  if (backend.vocab_size < 1) return bad("the backend reports no vocabulary");
  if (!c.step_trace_path.empty()) {
    auto writer = StepTraceWriter::open(c.step_trace_path);  // creates it, so the engine's own open succeeds
    if (!writer.ok()) return writer.error();
  }
  return Ok{};
}

}  // namespace sluice
