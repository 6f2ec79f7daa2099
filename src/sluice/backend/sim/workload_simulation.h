// The planner's what-if run: a workload played against a cost model under a
// simplified version of sluice's policy, to predict TTFT and inter-token
// latency before anyone buys hardware. It is NOT the engine's scheduler (that
// is sched/); it models the policy's intent:
//   - every decoding sequence gets one token per step;
//   - the rest of the step goes to prefill chunks, shortest remaining prompt
//     first, each chunk as large as keeps the predicted step under max_step_ms
//     (at least min_chunk_tokens, so prefill always advances);
//   - a request is admitted when a sequence slot is free and its whole
//     prompt + output fits the KV capacity not reserved by others (no
//     preemption, no prefix cache).
#pragma once

#include <cstdint>
#include <vector>

#include "sluice/backend/sim/workload.h"
#include "sluice/sched/cost_model.h"

namespace sluice::sim {

struct PlanPolicy {
  double max_step_ms = 50;
  std::int32_t max_num_seqs = 64;
  std::int32_t max_num_batched_tokens = 8192;
  std::int64_t kv_capacity_tokens = 0;
  std::int32_t max_model_len_tokens = 0;
  std::int32_t min_chunk_tokens = 64;
};

struct RequestOutcome {
  bool rejected = false;  // longer than max_model_len or than the whole KV capacity
  double arrival_ms = 0;
  double first_token_ms = 0;  // absolute time of the first token
  double finish_ms = 0;
  double max_gap_ms = 0;      // longest wait between two tokens after the first
  std::int32_t num_prompt_tokens = 0;
  std::int32_t num_output_tokens = 0;

  double ttft_ms() const { return first_token_ms - arrival_ms; }
  double mean_itl_ms() const {
    return num_output_tokens > 1 ? (finish_ms - first_token_ms) / (num_output_tokens - 1) : 0;
  }
};

struct WorkloadOutcome {
  std::vector<RequestOutcome> requests;  // same order as the input
  std::int64_t num_steps = 0;
  double makespan_ms = 0;
  double max_step_ms = 0;
  std::int64_t num_output_tokens = 0;
};

WorkloadOutcome simulate_workload(const CostModel& cost_model, const std::vector<WorkloadRequest>& workload,
                                  const PlanPolicy& policy);

}  // namespace sluice::sim
