// One request inside the engine, owned by the engine thread.
//   waiting (new, or preempted) -> running: prefilling in chunks -> decoding
//   -> finished (stop | length) / aborted / failed.
// Whether a running request is prefilling or decoding is derived from its
// lengths, never stored: num_cached_tokens <= num_computed_tokens <=
// num_scheduled_tokens, where num_scheduled_tokens = num_tokens +
// num_pending_tokens counts the tokens that steps still in flight will sample.
// Without --async-scheduling nothing is in flight between steps, so
// num_pending_tokens and num_inflight_tokens are 0 whenever the planner looks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "sluice/backend/batch.h"
#include "sluice/engine/engine.h"
#include "sluice/engine/token_log.h"
#include "sluice/kv/block_hash.h"
#include "sluice/kv/kv_cache_manager.h"

namespace sluice {

enum class RequestPhase { kWaiting, kRunning, kDone };

struct RequestState {
  SequenceId seq_id = 0;
  EngineRequest request;          // prompt ids moved into `tokens`
  std::vector<TokenId> tokens;    // prompt then generated
  std::vector<BlockHash> block_hashes;  // keys of the full blocks of `tokens`
  std::int32_t num_prompt_tokens = 0;
  // KV present for positions [0, n), or being written by a step in flight
  // (advanced when a step is submitted, so the next plan starts after it).
  std::int32_t num_computed_tokens = 0;
  std::int32_t num_inflight_tokens = 0;  // of num_computed_tokens, those whose step is not collected yet
  std::int32_t num_pending_tokens = 0;   // tokens steps in flight will sample (not in `tokens` yet)
  std::int32_t num_cached_tokens = 0;    // prompt tokens the first admission found cached
  std::int32_t max_num_tokens = 0;       // prompt + max_tokens (check_request: <= max_model_len)
  RequestPhase phase = RequestPhase::kWaiting;
  bool ever_admitted = false;
  // While waiting: the last prefix probe, and the KV eviction count it saw
  // (-1: none yet). Probing a 100k-token prompt walks 6k blocks; doing that
  // for every waiting request every step would cost more than the step.
  PrefixProbe probe;
  std::int64_t probe_evictions = -1;
  double last_token_ms = 0.0;            // for the decode-stall gauge
  double load_started_ms = 0.0;          // when its prefix began loading from the host tier
  std::vector<std::uint64_t> allowed_tokens;  // the constraint's mask for the next sample, if any
  // Async scheduling: `tokens` as the pipeline's worker sees them (made at the
  // first submit; shared with the batches in flight, which may outlive this).
  std::shared_ptr<TokenLog> token_log;
  std::shared_ptr<RequestStream> stream;
  RequestTimeline timeline;

  std::int32_t num_tokens() const { return static_cast<std::int32_t>(tokens.size()); }
  std::int32_t num_scheduled_tokens() const { return num_tokens() + num_pending_tokens; }
  std::int32_t num_generated_tokens() const { return num_tokens() - num_prompt_tokens; }
  // KV of positions [0, n) written by steps already collected.
  std::int32_t num_confirmed_computed_tokens() const { return num_computed_tokens - num_inflight_tokens; }
  // Its last token is still being sampled and is the last it may have: it runs
  // nothing more, and ends (length) when that step is collected.
  bool is_finishing() const { return num_pending_tokens > 0 && num_scheduled_tokens() >= max_num_tokens; }
  // Its next step is a decode: one token left to run, a sampled one (a
  // prompt's last token is the end of its prefill).
  bool decodes_next() const {
    return num_scheduled_tokens() - num_computed_tokens == 1 && num_scheduled_tokens() > num_prompt_tokens;
  }

  // Whether the token just appended ends the request, and why.
  struct Stop {
    FinishReason reason;
    std::optional<TokenId> stop_token;
  };
  std::optional<Stop> check_stop() const {
    const TokenId last = tokens.back();
    const bool past_min = num_generated_tokens() >= request.min_tokens;
    auto contains = [](const std::vector<TokenId>& ids, TokenId t) {
      return std::find(ids.begin(), ids.end(), t) != ids.end();
    };
    if (past_min && contains(request.stop_token_ids, last)) return Stop{FinishReason::kStop, last};
    if (past_min && !request.ignore_eos && contains(request.eos_token_ids, last)) {
      return Stop{FinishReason::kStop, last};
    }
    if (num_tokens() >= max_num_tokens) return Stop{FinishReason::kLength, std::nullopt};
    return std::nullopt;
  }
};

}  // namespace sluice
