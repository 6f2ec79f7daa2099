// What the step planner sees and what it decides. The engine fills SchedState
// from its own bookkeeping each step; plan_step() is a pure function of it, so
// scheduler tests are tables of states and expected plans.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/sched/scheduling_policy.h"

namespace sluice {

// One request, as far as scheduling is concerned. Lengths on one axis:
// num_cached_tokens <= num_computed_tokens <= num_tokens. A request has
// num_tokens - num_computed_tokens tokens to run; with exactly one left it is
// decoding (the last sampled token), with more it is prefilling (a prompt, or
// a preempted request's prompt + output being recomputed).
struct SchedRequest {
  SequenceId seq_id = 0;
  std::int32_t num_tokens = 0;
  std::int32_t num_computed_tokens = 0;   // running: KV present; waiting: 0
  std::int32_t num_allocated_blocks = 0;  // running only
  // Waiting only: the prefix-cache hit it would start from, and how many of
  // the hit blocks are currently free (admission takes them off the free count).
  std::int32_t num_cached_tokens = 0;
  std::int32_t num_hit_free_blocks = 0;
  // Waiting only: tokens right after num_cached_tokens held by the host tier,
  // which admission may load instead of recomputing.
  std::int32_t num_host_hit_tokens = 0;
  double arrival_ms = 0.0;

  std::int32_t num_remaining_tokens() const { return num_tokens - num_computed_tokens; }
  bool is_decoding() const { return num_remaining_tokens() == 1; }
};

struct SchedState {
  std::span<const SchedRequest> running;  // admitted, oldest admission first
  std::span<const SchedRequest> waiting;  // not admitted (new or preempted), arrival order
  // Admitted requests left out of `running`: their last token is being sampled
  // by a step in flight (--async-scheduling), so they run nothing more, but
  // they still hold their blocks and a seat until that step is collected.
  std::int32_t num_finishing_seqs = 0;
  // Admitted requests left out of `running` while their prefix loads from the
  // host tier: they hold blocks and a seat, and run once the loads complete.
  std::int32_t num_loading_seqs = 0;
  // Two step loops (EngineConfig::decode_lane): admitted requests left out of
  // `running` because the other loop runs them or has them in flight. They
  // hold blocks and a seat, and that loop makes progress without this plan.
  std::int32_t num_other_lane_seqs = 0;
  std::int32_t num_available_blocks = 0;  // free + cached free
  // Not available yet, but stores in flight (demotions, swap-outs) give them
  // back when they land: a decode short of a block waits for them rather
  // than preempting someone.
  std::int32_t num_freeing_blocks = 0;
  // Of the available blocks, cached prefixes that earned protection (SLRU).
  // Admitting a new request must not evict them: running requests may, so a
  // burst of cold prompts waits for memory instead of flushing hot prefixes.
  std::int32_t num_protected_blocks = 0;
  std::int32_t num_total_blocks = 0;
  std::int32_t block_size_tokens = 16;
  double now_ms = 0.0;
  std::uint64_t step_index = 0;  // rotates round-robin
  // How far the decodes are behind their max_step_ms pace: the long steps the
  // planner ran (SchedConfig::max_token_gap_ms) less what later steps paid
  // back. The engine carries StepPlan::decode_overrun_ms from plan to plan.
  double decode_overrun_ms = 0.0;
};

struct SchedConfig {
  SchedulingPolicy policy = SchedulingPolicy::kSluice;
  std::int32_t max_num_seqs = 64;
  std::int32_t max_num_batched_tokens = 8192;
  std::int32_t long_prefill_token_threshold = 0;  // 0 = no per-request cap
  double max_step_ms = 50.0;
  // When the step's decodes alone are predicted to take more than
  // (1 - min_prefill_share) x max_step_ms (many long-context decoders, a huge
  // model on few GPUs), the step may grow to decodes / (1 - share), so prefill
  // still gets this share of the GPU's time: decodes slow down by at most that
  // share, and long prompts are not starved for as long as the decodes run.
  double min_prefill_share = 0.25;
  // The longest predicted step that carries decodes, the bound on the gap
  // between two of a decode's tokens. When the first chunk's fixed cost (MLA's
  // K/V decompression over its whole prefix) would take most of a
  // max_step_ms step, one step may run up to this long with a chunk that
  // amortizes it; the steps after it pay the overrun back (decodes, and only
  // the chunks that fit the time left), so the decodes keep max_step_ms on
  // average. Equal to max_step_ms: no long steps.
  double max_token_gap_ms = 150.0;
  double aging_ms = 30000.0;
  // A prefill that has waited this long (since arrival) goes ahead of every
  // request that has not, in arrival order: under sustained overload, aging
  // alone cannot promise that (everybody ages), this bound does.
  double max_prefill_wait_ms = 120000.0;
  std::int32_t reserve_blocks = 0;  // admission keeps this many blocks free for decode growth
  // Time to copy one KV block from the host tier (block bytes / host link
  // rate); 0: no host tier, host hits are recomputed.
  double host_load_ms_per_block = 0.0;
};

struct ScheduledChunk {
  SequenceId seq_id = 0;
  std::int32_t num_new_tokens = 0;
  // Prefills only: the chunk admits a waiting request (its first chunk, from
  // its prefix-cache hit); otherwise it continues a running one.
  bool admits = false;
  // Admissions only: host-tier tokens (after the device hit) to load instead
  // of recomputing. A loading admission runs no tokens this step
  // (num_new_tokens == 0): the request computes once its loads complete.
  std::int32_t num_load_tokens = 0;
};

struct StepPlan {
  std::vector<ScheduledChunk> decodes;   // one token each
  std::vector<ScheduledChunk> prefills;  // running prefills and admissions (`admits`), in the policy's order
  std::vector<SequenceId> preempted;     // running requests that give their blocks back (recompute later)
  // Of `preempted`, those whose blocks are swapped out to the host tier first
  // (stored, then loaded back on resume): the copies are predicted cheaper
  // than recomputing their tokens.
  std::vector<SequenceId> swapped;
  double predicted_step_ms = 0.0;
  // SchedState::decode_overrun_ms for the next plan: grows by a long step's
  // time past max_step_ms, shrinks by what steps under it leave unused, and is
  // 0 once no decode runs or decodes alone nearly fill the step.
  double decode_overrun_ms = 0.0;

  bool empty() const { return decodes.empty() && prefills.empty(); }
  std::int64_t num_tokens() const;
};

}  // namespace sluice
