#include "sluice/sim/engine_replay.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "sluice/common/check.h"
#include "sluice/common/rng.h"

namespace sluice::sim {

ReplayOutcome replay(Engine& engine, std::span<const double> arrival_ms,
                     const std::function<EngineRequest(std::size_t)>& make_request, std::int64_t max_steps) {
  SLUICE_CHECK_MSG(engine.config().clock == ClockMode::kVirtual, "a replay runs on the engine's virtual clock");
  SLUICE_CHECK(std::is_sorted(arrival_ms.begin(), arrival_ms.end()));
  ReplayOutcome outcome;
  // Streams are drained as the engine pushes, so a long replay holds only the
  // outputs of requests still running.
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::size_t next = 0;
  std::int64_t num_steps = 0;
  for (;;) {
    while (next < arrival_ms.size() && arrival_ms[next] <= engine.now_ms()) {
      EngineRequest request = make_request(next);
      std::string request_id = request.request_id;
      auto stream = engine.submit(std::move(request));
      if (stream.ok()) {
        streams.push_back(*stream);
      } else {
        outcome.rejections.push_back(
            {.index = next, .request_id = std::move(request_id), .message = stream.error_message()});
      }
      ++next;
    }
    if (!engine.has_work()) {
      if (next == arrival_ms.size()) break;
      engine.advance_clock_to(arrival_ms[next]);
      continue;
    }
    if (num_steps == max_steps) break;
    const StepReport report = engine.step();
    ++num_steps;
    outcome.max_step_ms = std::max(outcome.max_step_ms, report.step_ms);
    for (const auto& stream : streams) {
      while (stream->poll()) {
      }
    }
    std::erase_if(streams, [](const std::shared_ptr<RequestStream>& s) { return s->finished(); });
  }
  outcome.drained = next == arrival_ms.size() && !engine.has_work();
  for (RequestTimeline& t : engine.take_finished_timelines()) outcome.timelines[t.request_id] = std::move(t);
  outcome.stats = engine.stats();
  return outcome;
}

ReplayOutcome replay(Engine& engine, std::vector<TimedRequest> workload, std::int64_t max_steps) {
  std::stable_sort(workload.begin(), workload.end(),
                   [](const TimedRequest& a, const TimedRequest& b) { return a.arrival_ms < b.arrival_ms; });
  std::vector<double> arrival_ms;
  arrival_ms.reserve(workload.size());
  for (const TimedRequest& r : workload) arrival_ms.push_back(r.arrival_ms);
  return replay(engine, arrival_ms, [&](std::size_t i) { return std::move(workload[i].request); }, max_steps);
}

std::vector<TokenId> synthetic_tokens(std::uint64_t id, std::int32_t num_tokens, std::int32_t vocab_size) {
  SLUICE_CHECK(num_tokens >= 0 && vocab_size > 0);
  std::vector<TokenId> tokens(static_cast<std::size_t>(num_tokens));
  for (std::int32_t i = 0; i < num_tokens; ++i) {
    const std::uint64_t hash = splitmix64(id * 0x100000001ULL + static_cast<std::uint64_t>(i));
    tokens[static_cast<std::size_t>(i)] = static_cast<TokenId>(hash % static_cast<std::uint64_t>(vocab_size));
  }
  return tokens;
}

double max_token_gap_ms(const RequestTimeline& timeline) {
  double gap = 0.0;
  for (std::size_t i = 1; i < timeline.token_ms.size(); ++i) {
    gap = std::max(gap, timeline.token_ms[i] - timeline.token_ms[i - 1]);
  }
  return gap;
}

}  // namespace sluice::sim
