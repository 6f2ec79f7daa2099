// Engine: the thread-safe shell around EngineCore. Submitting threads only
// validate and drop requests into an inbox; the step thread (or the caller of
// step()) moves them into the core, runs the step, then publishes a stats
// snapshot. The core is never touched by two threads at once.
#include "sluice/engine/engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "sluice/backend/backend.h"
#include "sluice/common/check.h"
#include "sluice/engine/engine_core.h"
#include "sluice/engine/request_validation.h"

namespace sluice {

struct Engine::Impl {
  Impl(std::unique_ptr<Backend> backend, std::shared_ptr<const CostModel> cost_model, EngineConfig cfg,
       std::unique_ptr<Backend> decode_lane)
      : config(cfg),
        info(backend->info()),
        backend_view(*backend),
        core(std::move(backend), std::move(cost_model), cfg, std::move(decode_lane)),
        limits{.max_model_len_tokens = cfg.max_model_len_tokens > 0 ? cfg.max_model_len_tokens
                                                                    : info.max_model_len_tokens,
               .vocab_size = info.vocab_size,
               .max_kv_tokens = static_cast<std::int64_t>(info.num_kv_blocks - core.reserve_blocks()) *
                                info.block_size_tokens},
        wall_start(std::chrono::steady_clock::now()) {}

  Result<std::shared_ptr<RequestStream>> submit(EngineRequest request);
  StepReport step();
  void loop();
  double now_ms() const;
  void take_inbox(double now_ms);
  void publish(double now_ms);
  // After a step: if the backend is gone, the engine dies (Engine::fatal_error).
  void check_backend(double now_ms);

  const EngineConfig config;
  const BackendInfo info;

  // The core's backend, for fatal_error() only (thread-safe there): submit
  // and /health see a failure the moment it happens, before the step returns.
  const Backend& backend_view;
  mutable std::mutex step_mutex;  // one step at a time; guards core
  EngineCore core;
  const EngineRequestLimits limits;

  mutable std::mutex mutex;  // everything below
  std::condition_variable wake;
  std::vector<std::unique_ptr<RequestState>> inbox;
  std::vector<std::string> aborts;
  std::unordered_set<std::string> live_ids;
  std::int32_t num_queued_requests = 0;
  std::int64_t num_queued_tokens = 0;
  SequenceId next_seq_id = 1;
  bool accepting = true;
  bool stop_requested = false;
  StopMode stop_mode = StopMode::kDrain;
  bool core_has_work = false;
  EngineStats stats;
  std::vector<RequestTimeline> finished_timelines;

  std::thread thread;
  const std::chrono::steady_clock::time_point wall_start;
  std::atomic<double> virtual_now_ms{0.0};
};

double Engine::Impl::now_ms() const {
  if (config.clock == ClockMode::kVirtual) return virtual_now_ms.load();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start).count();
}

Result<std::shared_ptr<RequestStream>> Engine::Impl::submit(EngineRequest request) {
  if (std::optional<RequestRejection> rejection = check_request(request, limits)) return std::move(rejection->error);
  const auto num_prompt_tokens = static_cast<std::int32_t>(request.prompt_token_ids.size());

  auto state = std::make_unique<RequestState>();
  auto stream = std::make_shared<RequestStream>(request.request_id);
  state->num_prompt_tokens = num_prompt_tokens;
  state->max_num_tokens = num_prompt_tokens + resolved_max_tokens(request, limits);
  state->stream = stream;
  state->timeline.request_id = request.request_id;
  state->timeline.num_prompt_tokens = num_prompt_tokens;
  state->tokens = std::move(request.prompt_token_ids);
  state->request = std::move(request);
  state->request.prompt_token_ids.clear();

  if (std::optional<std::string> dead = backend_view.fatal_error())
    return Error{"the engine is dead: " + *dead, ErrorCode::kUnavailable};
  std::lock_guard lock(mutex);
  if (!accepting) return Error{"the engine is shutting down", ErrorCode::kUnavailable};
  if (live_ids.contains(state->request.request_id)) {
    return Error{"request id '" + state->request.request_id + "' is already in use", ErrorCode::kInvalidArgument};
  }
  if (num_queued_requests >= config.max_num_queued_requests) {
    return Error{"queue full: " + std::to_string(num_queued_requests) + " requests waiting (max_num_queued_requests)",
                 ErrorCode::kResourceExhausted};
  }
  if (config.max_num_queued_tokens > 0 && num_queued_tokens + num_prompt_tokens > config.max_num_queued_tokens) {
    return Error{"queue full: " + std::to_string(num_queued_tokens) + " prompt tokens waiting (max_num_queued_tokens " +
                     std::to_string(config.max_num_queued_tokens) + ")",
                 ErrorCode::kResourceExhausted};
  }
  state->seq_id = next_seq_id++;
  state->timeline.arrival_ms = now_ms();
  live_ids.insert(state->request.request_id);
  ++num_queued_requests;
  num_queued_tokens += num_prompt_tokens;
  inbox.push_back(std::move(state));
  wake.notify_one();
  return stream;
}

void Engine::Impl::take_inbox(double now) {
  std::vector<std::unique_ptr<RequestState>> new_requests;
  std::vector<std::string> new_aborts;
  {
    std::lock_guard lock(mutex);
    new_requests.swap(inbox);
    new_aborts.swap(aborts);
  }
  for (auto& r : new_requests) core.add_request(std::move(r));
  for (const std::string& id : new_aborts) core.abort_request(id, "aborted", now);
}

void Engine::Impl::publish(double now) {
  EngineStats snapshot;
  core.fill_stats(snapshot, now);
  snapshot.now_ms = now;
  const EngineCore::Dequeued dequeued = core.take_dequeued();
  std::vector<std::string> ended = core.take_ended_ids();
  std::vector<RequestTimeline> timelines = core.take_finished_timelines();
  std::lock_guard lock(mutex);
  num_queued_requests -= dequeued.num_requests;
  num_queued_tokens -= dequeued.num_prompt_tokens;
  for (const std::string& id : ended) live_ids.erase(id);
  for (RequestTimeline& t : timelines) finished_timelines.push_back(std::move(t));
  snapshot.num_queued_prompt_tokens = num_queued_tokens;
  core_has_work = core.has_work();
  stats = snapshot;
}

void Engine::Impl::check_backend(double now) {
  const std::optional<std::string> reason = backend_view.fatal_error();
  if (!reason) return;
  // A request submitted just before the failure fails with the rest (after
  // every step, so one that slips in later does too): none waits on a
  // backend that will not run it.
  take_inbox(now);
  core.fail_all("the engine is dead: " + *reason, now);
}

StepReport Engine::Impl::step() {
  std::lock_guard step_lock(step_mutex);
  const double start = now_ms();
  take_inbox(start);
  StepReport report = core.step(start);
  if (config.clock == ClockMode::kVirtual) virtual_now_ms.store(std::max(start, report.end_ms));
  check_backend(now_ms());
  publish(now_ms());
  return report;
}

void Engine::Impl::loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex);
      wake.wait(lock, [&] { return stop_requested || !inbox.empty() || !aborts.empty() || core_has_work; });
      if (stop_requested && stop_mode == StopMode::kAbort) break;
      if (stop_requested && inbox.empty() && aborts.empty() && !core_has_work) break;
    }
    const StepReport report = step();
    if (report.idle) {
      // Work exists but nothing can run (waiting on memory held by requests
      // that are themselves blocked is prevented by admission, so this is
      // brief): do not spin.
      std::unique_lock lock(mutex);
      wake.wait_for(lock, std::chrono::milliseconds(1), [&] { return stop_requested || !inbox.empty(); });
    }
  }
  std::lock_guard step_lock(step_mutex);
  const double now = now_ms();
  take_inbox(now);
  core.abort_all("engine stopped", now);
  publish(now);
}

Engine::Engine(std::unique_ptr<Backend> backend, std::shared_ptr<const CostModel> cost_model, EngineConfig config,
               std::unique_ptr<Backend> decode_lane) {
  SLUICE_CHECK(backend != nullptr);
  const Status valid = validate(config, backend->info());
  SLUICE_CHECK_MSG(valid.ok(), valid.error_message());
  SLUICE_CHECK_EQ(config.decode_lane != DecodeLane::kOff, decode_lane != nullptr);
  impl_ = std::make_unique<Impl>(std::move(backend), std::move(cost_model), config, std::move(decode_lane));
  impl_->publish(impl_->now_ms());
}

Engine::~Engine() { stop(StopMode::kAbort); }

Result<std::shared_ptr<RequestStream>> Engine::submit(EngineRequest request) { return impl_->submit(std::move(request)); }

void Engine::abort(const std::string& request_id) {
  std::lock_guard lock(impl_->mutex);
  if (!impl_->live_ids.contains(request_id)) return;
  impl_->aborts.push_back(request_id);
  impl_->wake.notify_one();
}

void Engine::start() {
  SLUICE_CHECK_MSG(!impl_->thread.joinable(), "Engine::start called twice");
  impl_->thread = std::thread([this] { impl_->loop(); });
}

void Engine::stop(StopMode mode) {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->accepting = false;
    impl_->stop_requested = true;
    impl_->stop_mode = mode;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) {
    impl_->thread.join();
    return;
  }
  // Synchronous mode: the caller's thread does the draining.
  if (mode == StopMode::kDrain) {
    while (has_work()) {
      if (step().idle) break;  // nothing runnable: abort the rest below
    }
  }
  std::lock_guard step_lock(impl_->step_mutex);
  const double now = impl_->now_ms();
  impl_->take_inbox(now);
  impl_->core.abort_all("engine stopped", now);
  impl_->publish(now);
}

StepReport Engine::step() {
  SLUICE_CHECK_MSG(!impl_->thread.joinable(), "Engine::step is for synchronous mode (no start())");
  return impl_->step();
}

bool Engine::has_work() const {
  std::lock_guard lock(impl_->mutex);
  return !impl_->inbox.empty() || !impl_->aborts.empty() || impl_->core_has_work;
}

void Engine::advance_clock_to(double time_ms) {
  SLUICE_CHECK_MSG(impl_->config.clock == ClockMode::kVirtual, "advance_clock_to needs the virtual clock");
  double now = impl_->virtual_now_ms.load();
  while (time_ms > now && !impl_->virtual_now_ms.compare_exchange_weak(now, time_ms)) {
  }
}

double Engine::now_ms() const { return impl_->now_ms(); }

std::optional<std::string> Engine::fatal_error() const { return impl_->backend_view.fatal_error(); }

EngineStats Engine::stats() const {
  EngineStats snapshot;
  {
    std::lock_guard lock(impl_->mutex);
    snapshot = impl_->stats;
  }
  if (snapshot.oldest_decode_token_ms >= 0.0)
    snapshot.longest_current_decode_stall_ms =
        std::max(snapshot.longest_current_decode_stall_ms, impl_->now_ms() - snapshot.oldest_decode_token_ms);
  return snapshot;
}

std::vector<RequestTimeline> Engine::take_finished_timelines() {
  std::lock_guard lock(impl_->mutex);
  return std::exchange(impl_->finished_timelines, {});
}

void Engine::check_invariants() const {
  std::lock_guard step_lock(impl_->step_mutex);
  impl_->core.check_invariants();
}

const EngineConfig& Engine::config() const { return impl_->config; }
const BackendInfo& Engine::backend_info() const { return impl_->info; }
const EngineRequestLimits& Engine::request_limits() const { return impl_->limits; }

}  // namespace sluice
