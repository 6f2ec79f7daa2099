// Replays a timed workload through the real Engine on its virtual clock: each
// request is submitted when the clock reaches its arrival, the clock jumps over
// idle gaps, and the engine steps until every request has ended. `sluice plan`,
// the scenario tests and the trace benchmark all replay through this, so what
// they report is what the engine's scheduler does: there is no second
// scheduler to drift from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/engine/engine.h"

namespace sluice::sim {

struct TimedRequest {
  double arrival_ms = 0.0;
  EngineRequest request;
};

struct ReplayRejection {
  std::size_t index = 0;  // into the workload, in arrival order
  std::string request_id;
  std::string message;    // the engine's reason (too long, queue full, ...)
};

struct ReplayOutcome {
  std::map<std::string, RequestTimeline> timelines;  // every request that ended, by request id
  std::vector<ReplayRejection> rejections;           // requests Engine::submit refused
  EngineStats stats;                                 // at the end of the replay
  double max_step_ms = 0.0;                          // longest step run
  bool drained = false;  // false: max_steps ran out with work left

  std::int64_t num_rejected() const { return static_cast<std::int64_t>(rejections.size()); }
};

// Request i arrives at arrival_ms[i] (non-decreasing) and make_request(i)
// builds it only then, so a long trace never holds every prompt at once.
// The engine must run on the virtual clock, and step() is called on this
// thread (no start()). At most max_steps steps run.
ReplayOutcome replay(Engine& engine, std::span<const double> arrival_ms,
                     const std::function<EngineRequest(std::size_t)>& make_request, std::int64_t max_steps);

// Prebuilt requests, submitted in arrival order (ties keep their order).
ReplayOutcome replay(Engine& engine, std::vector<TimedRequest> workload, std::int64_t max_steps);

// `num_tokens` deterministic token ids in [0, vocab_size): the prompt of
// synthetic request `id`. Different ids share no prefix, so replays of
// synthetic workloads get no accidental prefix-cache hits.
std::vector<TokenId> synthetic_tokens(std::uint64_t id, std::int32_t num_tokens, std::int32_t vocab_size);

// Longest wait between two consecutive tokens of one request (0 for fewer than two).
double max_token_gap_ms(const RequestTimeline& timeline);

}  // namespace sluice::sim
