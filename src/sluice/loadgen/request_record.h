// What the load generator saw of one request. Times are milliseconds from the
// start of the run, on the server's clock scale (see RunOptions::server_speedup).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sluice/loadgen/workload.h"

namespace sluice::loadgen {

enum class RequestStatus {
  kCompleted,  // the stream ended with [DONE]
  kFailed,     // an HTTP error, an in-band error event, or a broken connection
  kCancelled,  // stopped by the load generator (background chats at the end, --max-duration-s)
  kNotSent,    // the run ended before its arrival time
};
const char* status_name(RequestStatus status);

struct RequestRecord {
  std::size_t index = 0;  // foreground: index in Workload::requests; background: after them, in start order
  std::string label;
  RequestRole role = RequestRole::kForeground;
  double arrival_ms = 0;  // when the workload wanted it sent
  double send_ms = 0;     // when it was sent (later than arrival_ms under --max-concurrency)
  std::optional<double> first_token_ms;
  double end_ms = 0;
  std::vector<double> token_ms;  // arrival of every chunk carrying output text; front() is the first token
  std::int64_t num_planned_prompt_tokens = 0;
  std::int64_t num_planned_output_tokens = 0;
  std::optional<std::int64_t> num_prompt_tokens;  // from the usage chunk
  std::optional<std::int64_t> num_usage_output_tokens;
  std::int64_t num_cached_tokens = 0;
  RequestStatus status = RequestStatus::kNotSent;
  int http_status = 0;
  std::string error;

  // Usage's count when the server sent one, else the chunks seen.
  std::int64_t num_output_tokens() const {
    return num_usage_output_tokens ? *num_usage_output_tokens : static_cast<std::int64_t>(token_ms.size());
  }
};

}  // namespace sluice::loadgen
