// Workload: requests for the planner's what-if runs. Either the built-in
// "report" workload (the user report's 8 long prompts among short chats) or a
// JSONL trace with input_length / output_length / timestamp per line (the
// Mooncake trace format in /work/shared/traces/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/common/result.h"

namespace sluice::sim {

struct WorkloadRequest {
  double arrival_ms = 0;
  std::int32_t num_prompt_tokens = 0;
  std::int32_t num_output_tokens = 0;
};

// 8 short chats (2k prompt, 2k output) at t = 0, then 8 prompts of 30k..300k
// tokens (evenly spaced) with outputs of 2k..8k arriving over 1..10 s. For a
// model with a shorter context every length is scaled down by the same factor
// so that prompt + output fits `max_model_len_tokens`.
std::vector<WorkloadRequest> report_workload(std::int32_t max_model_len_tokens);

// Reads a JSONL trace; `max_requests` > 0 keeps the first that many lines.
Result<std::vector<WorkloadRequest>> load_workload_jsonl(const std::string& path, std::int64_t max_requests);

}  // namespace sluice::sim
