#include "sluice/engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "sluice/common/check.h"
#include "sluice/sched/token_count_cost_model.h"

namespace sluice {
namespace {

std::int32_t num_host_blocks(const EngineConfig& config, const BackendInfo& info) {
  if (config.kv_offloading_bytes <= 0 || !config.enable_prefix_caching) return 0;
  return static_cast<std::int32_t>(config.kv_offloading_bytes / info.kv_bytes_per_block);
}

KvCacheConfig kv_config(const EngineConfig& config, const BackendInfo& info) {
  const std::int32_t bs = info.block_size_tokens;
  return KvCacheConfig{.num_blocks = info.num_kv_blocks,
                       .block_size_tokens = bs,
                       .enable_prefix_caching = config.enable_prefix_caching,
                       .eviction = config.eviction,
                       .slru_protected_fraction = config.slru_protected_fraction,
                       .num_host_blocks = num_host_blocks(config, info),
                       .host_eviction = config.kv_offloading_eviction,
                       .host_admission = config.kv_offloading_admission,
                       // Two full steps' new blocks (every seat's partial block included): a
                       // demotion started with a step frees its block for the step after, so
                       // this step allocates from what the previous one freed.
                       .demote_watermark_blocks = std::min(info.num_kv_blocks / 2,
                                                           2 * ((config.max_num_batched_tokens + bs - 1) / bs +
                                                                config.max_num_seqs))};
}

double host_load_ms_per_block(const EngineConfig& config, const BackendInfo& info) {
  if (num_host_blocks(config, info) == 0 || info.host_link_bytes_per_s <= 0.0) return 0.0;
  return static_cast<double>(info.kv_bytes_per_block) / info.host_link_bytes_per_s * 1000.0;
}

SchedConfig sched_config(const EngineConfig& config, const BackendInfo& info) {
  return SchedConfig{
      .policy = config.scheduling,
      .max_num_seqs = config.max_num_seqs,
      .max_num_batched_tokens = config.max_num_batched_tokens,
      .long_prefill_token_threshold = config.long_prefill_token_threshold,
      .max_step_ms = config.max_step_ms,
      .min_prefill_share = config.min_prefill_share,
      .max_token_gap_ms = config.max_token_gap_ms > 0.0 ? config.max_token_gap_ms : 3.0 * config.max_step_ms,
      .aging_ms = config.aging_ms,
      .max_prefill_wait_ms = config.max_prefill_wait_ms,
      .reserve_blocks = static_cast<std::int32_t>(config.kv_reserve_fraction * info.num_kv_blocks),
      .host_load_ms_per_block = host_load_ms_per_block(config, info),
  };
}

}  // namespace

EngineCore::EngineCore(std::unique_ptr<Backend> backend, std::shared_ptr<const CostModel> cost_model,
                       const EngineConfig& config, std::unique_ptr<Backend> decode_lane)
    : backend_(std::move(backend)),
      decode_backend_(std::move(decode_lane)),
      done_signal_(decode_backend_ ? std::make_shared<DoneSignal>() : nullptr),
      // With two loops each lane's batches run on a worker of its own.
      pipeline_(*backend_, config.async_scheduling || decode_backend_ != nullptr, done_signal_),
      decode_pipeline_(decode_backend_ ? std::make_unique<StepPipeline>(*decode_backend_, true, done_signal_)
                                       : nullptr),
      cost_model_(cost_model ? std::move(cost_model) : std::make_shared<TokenCountCostModel>()),
      config_(config),
      sched_config_(sched_config(config, backend_->info())),
      kv_(kv_config(config, backend_->info())) {
  if (config.online_cost_correction) {
    online_cost_model_ = std::make_shared<OnlineCostModel>(cost_model_);
    cost_model_ = online_cost_model_;
  }
  if (!config.step_trace_path.empty()) {
    auto writer = StepTraceWriter::open(config.step_trace_path);
    SLUICE_CHECK_MSG(writer.ok(), writer.ok() ? std::string() : writer.error_message());  // validate() tried it
    step_trace_ = std::move(writer).value();
  }
  if (kv_.has_host_tier()) {
    const Status allocated = backend_->allocate_host_kv_cache(kv_.num_host_blocks());
    SLUICE_CHECK_MSG(allocated.ok(), allocated.error_message());
  }
  if (has_decode_lane()) decode_lane_max_context_ = decode_lane_max_context(config, backend_->info(), cost_model_.get());
  // validate() refuses these with a message; here they would be bugs.
  SLUICE_CHECK(!has_decode_lane() || !config.async_scheduling);
}

RequestState* EngineCore::find(SequenceId seq_id) {
  const auto it = requests_.find(seq_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void EngineCore::add_request(std::unique_ptr<RequestState> request) {
  const SequenceId id = request->seq_id;
  extend_block_hashes(request->block_hashes, request->tokens, kv_.block_size_tokens(), request->request.cache_salt);
  ids_[request->request.request_id] = id;
  waiting_.push_back(id);
  requests_[id] = std::move(request);
}

void EngineCore::abort_request(const std::string& request_id, const std::string& why, double now_ms) {
  const auto it = ids_.find(request_id);
  if (it == ids_.end()) return;
  RequestState* r = find(it->second);
  SLUICE_CHECK(r != nullptr);
  finish(*r, {.reason = FinishReason::kAbort, .message = why}, now_ms);
}

void EngineCore::abort_all(const std::string& why, double now_ms) { end_all(FinishReason::kAbort, why, now_ms); }

void EngineCore::fail_all(const std::string& why, double now_ms) { end_all(FinishReason::kError, why, now_ms); }

void EngineCore::end_all(FinishReason reason, const std::string& why, double now_ms) {
  std::vector<SequenceId> ids;
  ids.reserve(ids_.size());
  for (const auto& [name, id] : ids_) ids.push_back(id);
  for (SequenceId id : ids) {
    RequestState* r = find(id);
    SLUICE_CHECK(r != nullptr);
    finish(*r, {.reason = reason, .message = why}, now_ms);
  }
}

// The engine clock inside one step() call: the virtual clock stands still
// (a collected step ends at its begin + the backend's step time), the wall
// clock moves.
class EngineCore::StepClock {
 public:
  StepClock(double start_ms, ClockMode mode)
      : start_ms_(start_ms), mode_(mode), wall_start_(std::chrono::steady_clock::now()) {}
  double now_ms() const {
    if (mode_ == ClockMode::kVirtual) return start_ms_;
    return start_ms_ +
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start_).count();
  }
  double end_ms(double begin_ms, double step_time_ms) const {
    return mode_ == ClockMode::kVirtual ? begin_ms + step_time_ms : now_ms();
  }

 private:
  double start_ms_;
  ClockMode mode_;
  std::chrono::steady_clock::time_point wall_start_;
};

StepReport EngineCore::step(double now_ms) {
  if (has_decode_lane()) return step_lanes(now_ms);
  const StepClock clock(now_ms, config_.clock);
  StepReport report{.start_ms = now_ms, .end_ms = now_ms};
  // Room for this step's allocations is made by demotions that started in
  // earlier steps; these make room for later ones.
  kv_.start_demotions();
  const bool submitted = plan_and_submit(kMain, now_ms, clock, report);
  if (submitted) report.idle = false;
  // Async scheduling keeps the step just submitted in flight; a call that
  // submits nothing collects what is left.
  const std::size_t keep_in_flight = config_.async_scheduling && submitted ? 1 : 0;
  while (in_flight_.size() > keep_in_flight) report = stream(collect(clock));
  return report;
}

StepReport EngineCore::step_lanes(double now_ms) {
  const StepClock clock(now_ms, config_.clock);
  StepReport report{.start_ms = now_ms, .end_ms = now_ms};
  kv_.start_demotions();
  auto busy = [&](int lane) { return pipeline(lane).num_in_flight() > 0; };
  // With nothing to prefill, the main lane runs the decodes: on every SM it
  // has (the decode lane may have a few), e.g. the long prompts' own decodes
  // once the last chunk is done.
  decodes_on_main_lane_ = !busy(kMain) && nothing_to_prefill();
  // On the wall clock a paced decode lane is planned once it is due, on what
  // the engine knows then; the virtual clock starts its step when due instead
  // (InFlightStep::not_before_ms).
  const bool decode_lane_waits = config_.clock == ClockMode::kWall && now_ms < decode_lane_due_ms();
  // Decodes first: they take their blocks before admissions do.
  for (const int lane : {kDecode, kMain})
    if (!busy(lane) && !(lane == kDecode && (decodes_on_main_lane_ || decode_lane_waits)))
      plan_and_submit(lane, now_ms, clock, report);
  if (in_flight_.empty()) return report;
  if (decode_lane_waits && !busy(kDecode) && !decodes_on_main_lane_) {
    // Not past the decode lane's turn: the next round plans it.
    const int lane = wait_for_a_lane_until(clock, decode_lane_due_ms());
    if (lane >= 0) return stream(collect(clock, lane));
    report.idle = false;  // the decode lane is due: plan it at once
    return report;
  }
  return stream(collect(clock, next_lane_to_collect()));
}

double EngineCore::decode_lane_due_ms() const {
  return config_.decode_lane_interval_ms > 0.0 ? last_step_begin_ms_[kDecode] + config_.decode_lane_interval_ms
                                               : -1e300;
}

bool EngineCore::nothing_to_prefill() const {
  if (!waiting_.empty() || kv_.num_copies_in_flight() > 0) return false;
  return std::all_of(running_.begin(), running_.end(), [&](SequenceId id) {
    const RequestState& r = *requests_.at(id);
    return r.is_finishing() || (r.decodes_next() && !kv_.is_loading(id));
  });
}

int EngineCore::lane_of(const RequestState& r) const {
  if (!r.decodes_next() || decodes_on_main_lane_) return kMain;
  return r.num_computed_tokens < decode_lane_max_context_ ? kDecode : kMain;
}

std::deque<EngineCore::InFlightStep>::iterator EngineCore::oldest_in_flight(int lane) {
  const auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [&](const InFlightStep& s) { return s.lane == lane; });
  SLUICE_CHECK(it != in_flight_.end());
  return it;
}

int EngineCore::next_lane_to_collect() {
  return config_.clock == ClockMode::kVirtual ? first_to_end_on_the_clock() : wait_for_a_lane();
}

int EngineCore::first_to_end_on_the_clock() {
  // Every lane's step in flight runs to its end (a sim step at once); then
  // the one that ends first on the virtual clock is collected first, as the
  // device would finish it first.
  for (;;) {
    const std::uint64_t seen = done_signal_->count();
    bool all_done = true;
    for (const int lane : {kDecode, kMain})
      all_done = all_done && (pipeline(lane).num_in_flight() == 0 || pipeline(lane).has_done());
    if (all_done) break;
    done_signal_->wait_past(seen);
  }
  int first = -1;
  double first_end_ms = std::numeric_limits<double>::infinity();
  for (const int lane : {kDecode, kMain}) {  // a tie goes to the decodes
    if (pipeline(lane).num_in_flight() == 0) continue;
    const InFlightStep& oldest = *oldest_in_flight(lane);
    const double end_ms = std::max({oldest.submit_ms, oldest.not_before_ms, last_step_end_ms_[lane]}) +
                          pipeline(lane).next_step_time_ms();
    if (end_ms < first_end_ms) {
      first_end_ms = end_ms;
      first = lane;
    }
  }
  SLUICE_CHECK(first >= 0);
  return first;
}

int EngineCore::wait_for_a_lane() {
  for (;;) {
    const std::uint64_t seen = done_signal_->count();
    for (const int lane : {kDecode, kMain})
      if (pipeline(lane).num_in_flight() > 0 && pipeline(lane).has_done()) return lane;
    done_signal_->wait_past(seen);
  }
}

int EngineCore::wait_for_a_lane_until(const StepClock& clock, double until_ms) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double, std::milli>(std::max(0.0, until_ms - clock.now_ms())));
  for (;;) {
    const std::uint64_t seen = done_signal_->count();
    for (const int lane : {kDecode, kMain})
      if (pipeline(lane).num_in_flight() > 0 && pipeline(lane).has_done()) return lane;
    if (!done_signal_->wait_past_until(seen, deadline)) return -1;
  }
}

bool EngineCore::plan_and_submit(int lane, double now_ms, const StepClock& clock, StepReport& report) {
  NextStep next;
  // The plan's decode_overrun_ms, kept until the last attempt: a second attempt plans from the same one.
  double planned_overrun_ms = 0.0;
  // A planned admission fails when the waiting request's prefix probe was
  // stale (its hit blocks were freed by their owners since: an extended probe
  // does not recount them). If that leaves the step with nothing to run (a
  // prefill-first plan leaves decodes out when it has a prefill), the step
  // would change nothing and repeat forever: plan once more, on redone probes.
  for (int attempt = 0; attempt < 2; ++attempt) {
    StepPlan plan = schedule(now_ms, lane);
    // Preemption frees a request's blocks and restarts it, which must not
    // happen to one a step in flight is still computing: settle first.
    if (!plan.preempted.empty() && !in_flight_.empty()) {
      ++num_pipeline_waits_;
      while (!in_flight_.empty())
        report = stream(collect(clock, has_decode_lane() ? next_lane_to_collect() : in_flight_.front().lane));
      plan = schedule(now_ms, lane);
    }
    for (SequenceId id : plan.preempted) {
      preempt(id, std::find(plan.swapped.begin(), plan.swapped.end(), id) != plan.swapped.end());
    }
    planned_overrun_ms = plan.decode_overrun_ms;
    next = NextStep{.record = {.predicted_step_ms = plan.predicted_step_ms,
                               .num_preempted = static_cast<std::int32_t>(plan.preempted.size()),
                               .lane = lane}};
    continue_running(plan, next);
    if (admit(plan, now_ms, next) == 0 || !next.batch.sequences.empty()) break;
  }
  if (planned_overrun_ms > decode_overrun_ms_) ++num_long_steps_;  // only a long step adds to it
  decode_overrun_ms_ = planned_overrun_ms;
  // Copies run on the main lane's backend (the decode lane's has no host tier).
  if (lane == kMain) next.batch.copies = kv_.take_new_copies();
  // Nothing to compute while copies run (a request waiting for its loads):
  // the step only waits for the next of them.
  // (With a decode lane, the main lane's worker waits, whatever the decodes do.)
  const bool waits_for_copies = lane == kMain && next.batch.sequences.empty() && next.batch.copies.empty() &&
                                (has_decode_lane() || in_flight_.empty()) && kv_.num_copies_in_flight() > 0;
  const bool submitted = !next.batch.sequences.empty() || !next.batch.copies.empty() || waits_for_copies;
  if (submitted) {
    next.record.submit_ms = clock.now_ms();
    if (lane == kDecode) next.record.not_before_ms = decode_lane_due_ms();
    if (has_decode_lane() && pipeline(lane == kMain ? kDecode : kMain).num_in_flight() > 0)
      ++num_steps_beside_other_lane_;
    submit(std::move(next));
  }
  return submitted;
}

void EngineCore::learn_step_cost(const InFlightStep& step, double start_ms, double measured_ms, double setup_ms,
                                 bool alone) {
  if ((!online_cost_model_ && !step_trace_) || step.entries.empty()) return;  // a wait for copies computes nothing
  StepShape shape;
  shape.sequences.reserve(step.entries.size());
  for (const InFlightStep::Entry& e : step.entries)
    shape.sequences.push_back({.num_new_tokens = e.num_new_tokens, .num_computed_tokens = e.num_computed_tokens});
  if (step_trace_)
    step_trace_->write(start_ms, measured_ms, step.predicted_step_ms, shape,
                       !has_decode_lane() ? nullptr : step.lane == kDecode ? "decode" : "main", setup_ms);
  // A step that built a plan or captured a graph is not timed as its shape costs.
  if (online_cost_model_ && alone && setup_ms <= 0.0) online_cost_model_->observe(shape, measured_ms);
}

StepPlan EngineCore::schedule(double now_ms, int lane) {
  if (!has_decode_lane() || lane == kDecode)
    return plan_step(build_sched_state(now_ms, lane), sched_config_, *cost_model_);
  // The prefill lane's chunks are sized by the token budget alone, as
  // prefill-first sizes them: no decode waits behind them.
  SchedConfig prefill_config = sched_config_;
  prefill_config.max_step_ms = std::numeric_limits<double>::infinity();
  return plan_step(build_sched_state(now_ms, lane), prefill_config, *cost_model_);
}

void EngineCore::submit(NextStep next) {
  Batch& batch = next.batch;
  // The block tables as every commit of this step left them.
  for (SequenceStep& s : batch.sequences) s.block_table = kv_.block_table(s.seq_id);
  std::vector<LateMask> late_masks;
  for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
    RequestState& r = *requests_.at(batch.sequences[i].seq_id);
    if (batch.sequences[i].sample && r.request.constraint)
      late_masks.push_back({.sequence_index = i, .constraint = r.request.constraint, .words = r.allowed_tokens});
  }
  // A step that is not collected before the next is planned (async
  // scheduling, two lanes) takes copies of what the engine will change.
  if (!config_.async_scheduling && !has_decode_lane()) {
    pipeline_.submit(SubmittedBatch::attached(std::move(batch), std::move(late_masks)));
  } else {
    std::vector<std::shared_ptr<TokenLog>> logs;
    logs.reserve(batch.sequences.size());
    for (const SequenceStep& s : batch.sequences) {
      RequestState& r = *requests_.at(s.seq_id);
      // Made before anything was sampled, so `tokens` is the prompt and the log holds what it does.
      if (!r.token_log) r.token_log = std::make_shared<TokenLog>(r.tokens, r.max_num_tokens);
      logs.push_back(r.token_log);
    }
    pipeline(next.record.lane).submit(SubmittedBatch::detached(batch, std::move(logs), std::move(late_masks)));
  }
  in_flight_.push_back(std::move(next.record));
  ++step_index_;
}

SchedState EngineCore::build_sched_state(double now_ms, int lane) {
  sched_running_.clear();
  sched_waiting_.clear();
  std::int32_t num_finishing = 0;
  std::int32_t num_loading = 0;
  std::int32_t num_other_lane = 0;
  for (SequenceId id : running_) {
    const RequestState& r = *requests_.at(id);
    if (r.is_finishing()) {
      ++num_finishing;
      continue;
    }
    if (kv_.is_loading(id)) {
      ++num_loading;
      continue;
    }
    if (has_decode_lane()) {
      if (r.num_inflight_tokens > 0 || lane_of(r) != lane) {
        ++num_other_lane;
        continue;
      }
    }
    sched_running_.push_back(SchedRequest{
        .seq_id = id,
        .num_tokens = r.num_scheduled_tokens(),
        .num_computed_tokens = r.num_computed_tokens,
        .num_allocated_blocks = static_cast<std::int32_t>(kv_.block_table(id).size()),
        .arrival_ms = r.timeline.arrival_ms,
    });
  }
  // The decode lane admits nobody.
  if (!has_decode_lane() || lane == kMain) {
    refresh_prefix_probes();
    for (SequenceId id : waiting_) {
      const RequestState& r = *requests_.at(id);
      const PrefixProbe& probe = r.probe;
      sched_waiting_.push_back(SchedRequest{
          .seq_id = id,
          .num_tokens = r.num_tokens(),
          .num_cached_tokens = probe.num_hit_blocks * kv_.block_size_tokens(),
          .num_hit_free_blocks = probe.num_hit_free_blocks,
          .num_host_hit_tokens = probe.num_host_hit_blocks * kv_.block_size_tokens(),
          .arrival_ms = r.timeline.arrival_ms,
      });
    }
  }
  return SchedState{.running = sched_running_,
                    .waiting = sched_waiting_,
                    .num_finishing_seqs = num_finishing,
                    .num_loading_seqs = num_loading,
                    .num_other_lane_seqs = num_other_lane,
                    .num_available_blocks = kv_.num_available_blocks(),
                    .num_freeing_blocks = kv_.num_freeing_blocks(),
                    .num_protected_blocks = kv_.num_protected_free_blocks(),
                    .num_total_blocks = kv_.num_blocks(),
                    .block_size_tokens = kv_.block_size_tokens(),
                    .now_ms = now_ms,
                    .step_index = step_index_,
                    .decode_overrun_ms = decode_overrun_ms_};
}

// Waiting requests' prefix probes, kept across steps: while nothing has been
// evicted a probe only needs extending past its last hit (O(1) when nothing
// changed). After evictions a probe must be redone from the start; those
// re-probes share a per-step budget of block lookups, rotating through the
// queue, and a probe not yet redone stays as it was (the planner's estimate
// may be stale; admit() matches exactly).
void EngineCore::refresh_prefix_probes() {
  constexpr std::int64_t kReprobeBudgetBlocks = 16384;
  const std::int64_t evictions = kv_.num_evicted_blocks();
  std::int64_t budget = kReprobeBudgetBlocks;
  const std::size_t n = waiting_.size();
  const std::size_t first = n == 0 ? 0 : static_cast<std::size_t>(step_index_ % n);
  for (std::size_t k = 0; k < n; ++k) {
    RequestState& r = *requests_.at(waiting_[(first + k) % n]);
    // At least the last token is computed, so there is a position to sample from.
    const std::int32_t max_cached_tokens = r.num_tokens() - 1;
    if (r.probe_evictions == evictions) {
      kv_.extend_probe(r.block_hashes, max_cached_tokens, r.probe);
    } else if (budget > 0 || r.probe_evictions < 0) {
      r.probe = kv_.probe_prefix(r.block_hashes, max_cached_tokens);
      r.probe_evictions = evictions;
      budget -= r.probe.num_hit_blocks + 1;
    }
  }
}

void EngineCore::preempt(SequenceId seq_id, bool swap) {
  RequestState& r = *requests_.at(seq_id);
  SLUICE_CHECK(r.phase == RequestPhase::kRunning);
  SLUICE_CHECK(in_flight_.empty());
  if (swap) {
    kv_.swap_out(seq_id, r.block_hashes);
    ++num_swap_preemptions_;
  } else {
    kv_.free(seq_id);
  }
  // Its blocks stay cached until evicted (and, swapped, in the host tier), so
  // on resume its prefix probe finds them: hit, load, or recompute.
  r.num_computed_tokens = 0;
  r.phase = RequestPhase::kWaiting;
  r.probe_evictions = -1;
  ++r.timeline.num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), seq_id));
  // Back in arrival order, so it keeps its seniority.
  const auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](SequenceId other) {
    return requests_.at(other)->timeline.arrival_ms > r.timeline.arrival_ms;
  });
  waiting_.insert(pos, seq_id);
}

void EngineCore::add_to_step(RequestState& r, std::int32_t num_new_tokens, NextStep& next) {
  const std::int32_t end = r.num_computed_tokens + num_new_tokens;
  const bool sample = end == r.num_scheduled_tokens();
  // Zeroed here, filled late (StepPipeline: once the forward is launched).
  if (sample && r.request.constraint) r.allowed_tokens.assign(num_token_mask_words(backend_->info().vocab_size), 0);
  next.batch.sequences.push_back(SequenceStep{
      .seq_id = r.seq_id,
      .tokens = r.tokens,
      .num_prompt_tokens = r.num_prompt_tokens,
      .num_computed_tokens = r.num_computed_tokens,
      .num_new_tokens = num_new_tokens,
      .block_table = {},  // filled at submit: later commits may grow any table
      .sample = sample,
      .sampling = r.request.sampling,
      .allowed_tokens = sample && r.request.constraint ? std::span<const std::uint64_t>(r.allowed_tokens)
                                                       : std::span<const std::uint64_t>(),
  });
  // A decode runs the last sampled token; anything else is (part of) a prefill.
  const bool is_decode = r.decodes_next();
  next.record.entries.push_back({.seq_id = r.seq_id,
                                 .num_computed_tokens = r.num_computed_tokens,
                                 .num_new_tokens = num_new_tokens,
                                 .sample = sample,
                                 .is_decode = is_decode});
  r.num_computed_tokens = end;
  r.num_inflight_tokens += num_new_tokens;
  if (sample) ++r.num_pending_tokens;
}

void EngineCore::continue_running(const StepPlan& plan, NextStep& next) {
  next.batch.sequences.reserve(plan.decodes.size() + plan.prefills.size());
  next.record.entries.reserve(plan.decodes.size() + plan.prefills.size());
  for (const ScheduledChunk& c : plan.decodes) {
    RequestState& r = *requests_.at(c.seq_id);
    if (!kv_.commit({.seq_id = c.seq_id, .num_tokens = r.num_scheduled_tokens()}).ok()) continue;
    add_to_step(r, c.num_new_tokens, next);
  }
  for (const ScheduledChunk& c : plan.prefills) {
    if (c.admits) continue;
    RequestState& r = *requests_.at(c.seq_id);
    const std::int32_t end = std::min(r.num_scheduled_tokens(), r.num_computed_tokens + c.num_new_tokens);
    if (!kv_.commit({.seq_id = c.seq_id, .num_tokens = end}).ok()) continue;
    add_to_step(r, end - r.num_computed_tokens, next);
  }
}

std::int32_t EngineCore::admit(const StepPlan& plan, double now_ms, NextStep& next) {
  std::vector<SequenceId> admitted;
  std::int32_t num_failed = 0;
  for (const ScheduledChunk& c : plan.prefills) {
    if (!c.admits) continue;
    RequestState& r = *requests_.at(c.seq_id);
    SLUICE_CHECK(r.phase == RequestPhase::kWaiting);
    const auto max_load_blocks = static_cast<std::size_t>(c.num_load_tokens / kv_.block_size_tokens());
    PrefixMatch match = kv_.match_prefix(r.block_hashes, r.num_tokens() - 1);
    // A load takes all its device blocks at once, often more than demotion
    // keeps free: allocating them now would evict cached keys that never
    // reached the host (other sessions' prefixes, about to return). It waits
    // for the demotions that make the room instead, about a step. Those may
    // evict host blocks and let device keys go: match again after them.
    if (const std::size_t n = std::min(match.host_blocks.size(), max_load_blocks); n > 0) {
      if (!kv_.make_room_below(static_cast<std::int32_t>(n))) {
        ++num_failed;
        continue;
      }
      match = kv_.match_prefix(r.block_hashes, r.num_tokens() - 1);
    }
    // The plan priced the load against the probe; the cache may have moved
    // since, so load at most what the plan chose and what is still there.
    const std::size_t num_load_blocks = std::min(match.host_blocks.size(), max_load_blocks);
    const std::size_t num_host_hit_blocks = match.host_blocks.size();
    match.host_blocks.resize(num_load_blocks);
    const bool loads = num_load_blocks > 0;
    if (c.num_new_tokens == 0 && !loads) {  // its host hit is gone: it waits for a chunk
      r.probe_evictions = -1;
      ++num_failed;
      continue;
    }
    const std::int32_t start =
        match.num_cached_tokens + static_cast<std::int32_t>(num_load_blocks) * kv_.block_size_tokens();
    const std::int32_t end = loads ? start : std::min(r.num_tokens(), start + c.num_new_tokens);
    const Status committed = kv_.commit({.seq_id = c.seq_id,
                                         .num_tokens = end,
                                         .prefix = std::move(match),
                                         .num_queried_tokens = r.num_tokens()});
    if (!committed.ok()) {
      r.probe_evictions = -1;
      ++num_failed;
      continue;
    }
    num_host_hit_tokens_recomputed_ +=
        static_cast<std::int64_t>(num_host_hit_blocks - num_load_blocks) * kv_.block_size_tokens();
    r.num_computed_tokens = start;
    r.phase = RequestPhase::kRunning;
    if (!r.ever_admitted) {
      r.ever_admitted = true;
      r.num_cached_tokens = std::min(start, r.num_prompt_tokens);
      r.timeline.num_cached_tokens = r.num_cached_tokens;
      r.timeline.admitted_ms = now_ms;
      ++dequeued_.num_requests;
      dequeued_.num_prompt_tokens += r.num_prompt_tokens;
    }
    admitted.push_back(c.seq_id);
    if (loads) {
      r.load_started_ms = now_ms;
      loading_.push_back(c.seq_id);
      continue;
    }
    add_to_step(r, end - start, next);
  }
  if (admitted.empty()) return num_failed;
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(),
                                [&](SequenceId id) {
                                  return std::find(admitted.begin(), admitted.end(), id) != admitted.end();
                                }),
                 waiting_.end());
  running_.insert(running_.end(), admitted.begin(), admitted.end());
  // Here, not only between steps: a request finishing in flight still holds its seat.
  SLUICE_CHECK_LE(static_cast<std::int32_t>(running_.size()), config_.max_num_seqs);
  return num_failed;
}

void EngineCore::settle_loads(double now_ms) {
  std::vector<SequenceId> done;
  for (SequenceId id : loading_) {
    if (kv_.is_loading(id)) continue;
    done.push_back(id);
  }
  for (SequenceId id : done) {
    std::erase(loading_, id);
    RequestState& r = *requests_.at(id);
    if (kv_.load_failed(id)) {
      finish(r, {.reason = FinishReason::kError, .message = "loading its cached prefix from host memory failed"},
             now_ms);
      continue;
    }
    ++num_loads_done_;
    total_load_ms_ += now_ms - r.load_started_ms;
  }
}

EngineCore::CollectedStep EngineCore::collect(const StepClock& clock, int lane) {
  // A lane's steps are collected in its submission order.
  const auto it = oldest_in_flight(lane);
  CollectedStep collected{.record = std::move(*it), .executed = pipeline(lane).collect()};
  in_flight_.erase(it);
  const InFlightStep& step = collected.record;
  const ExecutedStep& executed = collected.executed;
  SLUICE_CHECK_EQ(executed.outputs.size(), step.entries.size());
  const double begin_ms = std::max({step.submit_ms, step.not_before_ms, last_step_end_ms_[lane]});
  const double end_ms = clock.end_ms(begin_ms, executed.step_time_ms);
  last_step_end_ms_[lane] = end_ms;
  last_step_begin_ms_[lane] = begin_ms;

  StepReport& report = collected.report;
  report = {.start_ms = begin_ms,
            .end_ms = end_ms,
            .step_ms = end_ms - begin_ms,
            .predicted_step_ms = step.predicted_step_ms,
            .num_preempted = step.num_preempted,
            .idle = false};
  // A decode lane's step shares the GPU with a prefill chunk that dominates
  // it: its time says nothing about the step alone (the trace keeps it). A
  // chunk beside decodes runs a few percent slow, which the model may learn.
  learn_step_cost(step, begin_ms, executed.step_time_ms, executed.setup_ms, /*alone=*/lane == kMain);
  for (const KvCopyCompletion& c : executed.completed_copies) kv_.complete_copy(c);
  settle_loads(end_ms);
  for (std::size_t i = 0; i < step.entries.size(); ++i) {
    const InFlightStep::Entry& e = step.entries[i];
    if (e.is_decode) {
      ++report.num_decode_seqs;
    } else {
      ++report.num_prefill_seqs;
      report.num_prefill_tokens += e.num_new_tokens;
    }
    RequestState* found = find(e.seq_id);
    if (found == nullptr) {  // ended while the step was in flight: its results are dropped
      ++num_dropped_sequence_steps_;
      continue;
    }
    RequestState& r = *found;
    SLUICE_CHECK(r.phase == RequestPhase::kRunning);
    r.num_inflight_tokens -= e.num_new_tokens;
    if (e.sample) --r.num_pending_tokens;
    if (executed.failures[i]) {
      finish(r, {.reason = FinishReason::kError, .message = *executed.failures[i]}, end_ms);
      continue;
    }
    if (!e.is_decode) {
      num_prompt_tokens_computed_ += e.num_new_tokens;
      r.timeline.prefill_chunks.push_back({.start_ms = begin_ms,
                                           .end_ms = end_ms,
                                           .num_computed_tokens = e.num_computed_tokens,
                                           .num_tokens = e.num_new_tokens});
    }
    kv_.cache_computed_blocks(r.seq_id, r.block_hashes, r.num_confirmed_computed_tokens());
  }
  for (const InFlightStep::Entry& e : step.entries) {
    const auto parked = std::find(frees_after_collect_.begin(), frees_after_collect_.end(), e.seq_id);
    if (parked == frees_after_collect_.end()) continue;
    kv_.free(e.seq_id);
    frees_after_collect_.erase(parked);
  }

  ++num_steps_;
  if (lane == kDecode) ++num_decode_lane_steps_;
  if (lane == kMain && has_decode_lane() && !step.entries.empty() &&
      std::all_of(step.entries.begin(), step.entries.end(), [](const InFlightStep::Entry& e) { return e.is_decode; }))
    ++num_main_lane_decode_steps_;
  last_step_ms_ = report.step_ms;
  max_step_ms_seen_ = std::max(max_step_ms_seen_, last_step_ms_);
  total_step_ms_ += last_step_ms_;
  return collected;
}

StepReport EngineCore::stream(const CollectedStep& step) {
  const double end_ms = step.report.end_ms;
  for (std::size_t i = 0; i < step.record.entries.size(); ++i) {
    const InFlightStep::Entry& e = step.record.entries[i];
    if (!e.sample) continue;
    RequestState* found = find(e.seq_id);
    if (found == nullptr) continue;  // ended in flight, or failed in this step
    RequestState& r = *found;
    const SequenceOutput& out = step.executed.outputs[i];
    if (!out.token.has_value()) {
      finish(r, {.reason = FinishReason::kError, .message = "backend returned no token for a sampled sequence"},
             end_ms);
      continue;
    }
    r.tokens.push_back(*out.token);
    extend_block_hashes(r.block_hashes, r.tokens, kv_.block_size_tokens(), r.request.cache_salt);
    ++num_generated_tokens_;
    if (!r.timeline.first_token_ms) r.timeline.first_token_ms = end_ms;
    r.timeline.token_ms.push_back(end_ms);
    r.last_token_ms = end_ms;

    GeneratedToken token{.token = *out.token, .logprob = out.logprob, .top_logprobs = out.top_logprobs};
    if (const std::optional<RequestState::Stop> stop = r.check_stop()) {
      finish(r, {.reason = stop->reason, .stop_token = stop->stop_token, .last_tokens = {std::move(token)}}, end_ms);
      continue;
    }
    r.stream->push(RequestOutput{.tokens = {std::move(token)},
                                 .num_prompt_tokens = r.num_prompt_tokens,
                                 .num_cached_tokens = r.num_cached_tokens,
                                 .num_generated_tokens = r.num_generated_tokens()});
  }
  return step.report;
}

void EngineCore::finish(RequestState& r, Ending ending, double now_ms) {
  if (r.phase == RequestPhase::kDone) return;
  const SequenceId id = r.seq_id;
  if (r.phase == RequestPhase::kRunning) {
    // With two lanes the other may be given these blocks while this one's
    // step still writes them: they go back when that step is collected.
    if (has_decode_lane() && r.num_inflight_tokens > 0) {
      frees_after_collect_.push_back(id);
    } else {
      kv_.free(id);
    }
    running_.erase(std::find(running_.begin(), running_.end(), id));
    std::erase(loading_, id);
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
    if (!r.ever_admitted) {
      ++dequeued_.num_requests;
      dequeued_.num_prompt_tokens += r.num_prompt_tokens;
    }
  }
  r.phase = RequestPhase::kDone;
  switch (ending.reason) {
    case FinishReason::kStop:
    case FinishReason::kLength: ++num_finished_; break;
    case FinishReason::kAbort: ++num_aborted_; break;
    case FinishReason::kError: ++num_failed_; break;
  }
  r.stream->push(RequestOutput{.tokens = std::move(ending.last_tokens),
                               .finish_reason = ending.reason,
                               .error_message = std::move(ending.message),
                               .stop_token = ending.stop_token,
                               .num_prompt_tokens = r.num_prompt_tokens,
                               .num_cached_tokens = r.num_cached_tokens,
                               .num_generated_tokens = r.num_generated_tokens()});
  r.timeline.finish_ms = std::max(now_ms, r.last_token_ms);
  r.timeline.finish_reason = ending.reason;
  finished_timelines_.push_back(std::move(r.timeline));
  ended_ids_.push_back(r.request.request_id);
  ids_.erase(r.request.request_id);
  requests_.erase(id);  // r is gone from here on
}

void EngineCore::fill_stats(EngineStats& stats, double now_ms) const {
  stats.num_running = static_cast<std::int32_t>(running_.size());
  stats.num_waiting = static_cast<std::int32_t>(waiting_.size());
  stats.num_kv_blocks = kv_.num_blocks();
  stats.num_free_kv_blocks = kv_.num_available_blocks();
  stats.num_cached_free_kv_blocks = kv_.num_cached_free_blocks();
  stats.kv_usage = 1.0 - static_cast<double>(kv_.num_available_blocks()) / kv_.num_blocks();
  const KvCacheCounters kv = kv_.counters();
  stats.prefix_cache_queried_tokens = kv.num_queried_tokens;
  stats.prefix_cache_hit_tokens = kv.num_hit_tokens;
  stats.prefix_cache_evicted_blocks = kv.num_evicted_blocks;
  stats.prefix_cache_device_hit_queries = kv.num_queries_with_device_hits;
  stats.prefix_cache_host_hit_queries = kv.num_queries_with_host_hits;
  stats.num_host_kv_blocks = kv_.num_host_blocks();
  stats.num_host_stored_kv_blocks = kv_.num_host_stored_blocks();
  stats.host_cache_queried_tokens = kv.num_host_queried_tokens;
  stats.host_cache_hit_tokens = kv.num_host_hit_tokens;
  stats.host_loaded_blocks = kv.num_host_loaded_blocks;
  stats.host_stored_blocks = kv.num_host_stored_blocks;
  stats.host_evicted_blocks = kv.num_host_evicted_blocks;
  stats.host_loaded_bytes = kv.num_host_loaded_blocks * backend_->info().kv_bytes_per_block;
  stats.host_stored_bytes = kv.num_host_stored_blocks * backend_->info().kv_bytes_per_block;
  stats.host_failed_copies = kv.num_failed_copies;
  stats.host_demotions_skipped = kv.num_demotions_skipped;
  stats.host_evicted_past_admitting = kv.num_evicted_past_host_admitting;
  stats.host_evicted_past_growing = kv.num_evicted_past_host_growing;
  stats.host_evicted_past_while_demoting = kv.num_evicted_past_host_while_demoting;
  stats.host_num_loads = num_loads_done_;
  stats.host_hit_tokens_recomputed = num_host_hit_tokens_recomputed_;
  stats.host_load_ms_total = total_load_ms_;
  stats.num_kv_copies_in_flight = kv_.num_copies_in_flight();
  stats.num_steps = num_steps_;
  stats.last_step_ms = last_step_ms_;
  stats.max_step_ms_seen = max_step_ms_seen_;
  stats.total_step_ms = total_step_ms_;
  stats.num_prompt_tokens_computed = num_prompt_tokens_computed_;
  stats.num_generated_tokens = num_generated_tokens_;
  stats.num_preemptions = num_preemptions_;
  stats.num_swap_preemptions = num_swap_preemptions_;
  stats.host_swapped_out_blocks = kv.num_host_swapped_out_blocks;
  stats.num_dropped_sequence_steps = num_dropped_sequence_steps_;
  stats.num_pipeline_waits = num_pipeline_waits_;
  stats.num_long_steps = num_long_steps_;
  stats.num_decode_lane_steps = num_decode_lane_steps_;
  stats.num_main_lane_decode_steps = num_main_lane_decode_steps_;
  stats.num_steps_beside_other_lane = num_steps_beside_other_lane_;
  if (online_cost_model_) stats.cost_correction_factors = online_cost_model_->factors();
  stats.num_requests_finished = num_finished_;
  stats.num_requests_aborted = num_aborted_;
  stats.num_requests_failed = num_failed_;
  double stall = 0.0;
  double oldest = -1.0;
  for (SequenceId id : running_) {
    const RequestState& r = *requests_.at(id);
    if (r.num_generated_tokens() == 0) continue;
    stall = std::max(stall, now_ms - r.last_token_ms);
    oldest = oldest < 0.0 ? r.last_token_ms : std::min(oldest, r.last_token_ms);
  }
  stats.longest_current_decode_stall_ms = stall;
  stats.oldest_decode_token_ms = oldest;
}

std::vector<RequestTimeline> EngineCore::take_finished_timelines() { return std::exchange(finished_timelines_, {}); }
EngineCore::Dequeued EngineCore::take_dequeued() { return std::exchange(dequeued_, {}); }
std::vector<std::string> EngineCore::take_ended_ids() { return std::exchange(ended_ids_, {}); }

void EngineCore::check_invariants() const {
  kv_.check_invariants();
  SLUICE_CHECK_EQ(requests_.size(), running_.size() + waiting_.size());
  SLUICE_CHECK_EQ(ids_.size(), requests_.size());
  SLUICE_CHECK_LE(static_cast<std::int32_t>(running_.size()), config_.max_num_seqs);
  for (SequenceId id : running_) {
    const RequestState& r = *requests_.at(id);
    SLUICE_CHECK(r.phase == RequestPhase::kRunning);
    const bool listed_loading = std::find(loading_.begin(), loading_.end(), id) != loading_.end();
    SLUICE_CHECK_EQ(kv_.is_loading(id), listed_loading);
    // A loading request runs nothing until its loads land.
    if (listed_loading) SLUICE_CHECK_EQ(r.num_inflight_tokens, 0);
    SLUICE_CHECK(r.num_computed_tokens < r.num_scheduled_tokens());  // something is always left to run
    SLUICE_CHECK_LE(r.num_computed_tokens,
                    static_cast<std::int32_t>(kv_.block_table(id).size()) * kv_.block_size_tokens());
    SLUICE_CHECK_LE(0, r.num_inflight_tokens);
    SLUICE_CHECK_LE(r.num_inflight_tokens, r.num_computed_tokens);
    SLUICE_CHECK_LE(0, r.num_pending_tokens);
    if (in_flight_.empty()) {
      SLUICE_CHECK_EQ(r.num_inflight_tokens, 0);
      SLUICE_CHECK_EQ(r.num_pending_tokens, 0);
    }
  }
  if (!has_decode_lane()) {
    SLUICE_CHECK_EQ(in_flight_.size(), pipeline_.num_in_flight());
    SLUICE_CHECK_LE(in_flight_.size(), 1u);  // between calls: at most the step async scheduling keeps
  } else {
    // Between calls: at most one step a lane; each running request in one of them.
    SLUICE_CHECK_EQ(in_flight_.size(), pipeline_.num_in_flight() + decode_pipeline_->num_in_flight());
    SLUICE_CHECK_LE(pipeline_.num_in_flight(), 1u);
    SLUICE_CHECK_LE(decode_pipeline_->num_in_flight(), 1u);
    for (std::size_t a = 0; a < in_flight_.size(); ++a)
      for (std::size_t b = a + 1; b < in_flight_.size(); ++b)
        for (const InFlightStep::Entry& x : in_flight_[a].entries)
          for (const InFlightStep::Entry& y : in_flight_[b].entries) SLUICE_CHECK(x.seq_id != y.seq_id);
  }
  for (SequenceId id : frees_after_collect_) {
    SLUICE_CHECK(kv_.has_sequence(id));
    SLUICE_CHECK(!requests_.contains(id));
  }
  for (SequenceId id : waiting_) {
    const RequestState& r = *requests_.at(id);
    SLUICE_CHECK(r.phase == RequestPhase::kWaiting);
    SLUICE_CHECK_EQ(r.num_computed_tokens, 0);
    SLUICE_CHECK_EQ(r.num_inflight_tokens + r.num_pending_tokens, 0);
    SLUICE_CHECK(!kv_.has_sequence(id));
  }
}

}  // namespace sluice
