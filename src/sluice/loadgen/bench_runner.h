// Plays a workload against a server: sends each request at its arrival time
// (or after the turn it follows), at most max_concurrency foreground requests
// at once, keeps the background chats going until the foreground is done, and
// returns one record per request. One thread, one io_context.
#pragma once

#include <cstdint>
#include <vector>

#include "sluice/common/result.h"
#include "sluice/loadgen/prompt_source.h"
#include "sluice/loadgen/request_record.h"
#include "sluice/loadgen/server_target.h"
#include "sluice/loadgen/workload.h"

namespace sluice::loadgen {

struct RunOptions {
  TokenSpace tokens;
  std::int32_t max_concurrency = 0;  // foreground requests in flight; 0: no limit
  // The server runs this many times faster than real time (sluice serve
  // --device sim --sim-speed S): arrivals are sent S times sooner and every
  // time is reported on the server's scale (real time x S).
  double server_speedup = 1.0;
  double max_duration_s = 0;  // 0: none; else everything still running then is cancelled
  bool show_progress = false;  // a progress bar on stderr
};

// Records: workload.requests in order, then the background chats in start order.
Result<std::vector<RequestRecord>> run_workload(const ServerTarget& target, const Workload& workload,
                                                const RunOptions& options);

}  // namespace sluice::loadgen
