// EngineCore: everything one step touches, single-threaded. The Engine wraps
// it with a thread, an inbox for submits/aborts and a stats snapshot; tests of
// step-by-step timelines drive it through Engine::step().
//
// Two step loops (a decode lane, EngineConfig::decode_lane): the backend's
// own lane runs prefill chunks under the token budget alone, a second one
// (Backend::make_lane) runs every decode, each with a step in flight at once
// (docs/architecture.md, "Decodes beside prefill"). A request is in at most
// one of them at a time; each step() plans whichever lanes are idle, then
// collects whichever step finishes first.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "sluice/backend/backend.h"
#include "sluice/engine/engine.h"
#include "sluice/engine/request_state.h"
#include "sluice/engine/step_pipeline.h"
#include "sluice/engine/step_trace.h"
#include "sluice/kv/kv_cache_manager.h"
#include "sluice/sched/online_cost_model.h"
#include "sluice/sched/planner.h"

namespace sluice {

class EngineCore {
 public:
  // decode_lane: the second step loop's backend, made from `backend`
  // (Backend::make_lane); null runs one loop.
  EngineCore(std::unique_ptr<Backend> backend, std::shared_ptr<const CostModel> cost_model,
             const EngineConfig& config, std::unique_ptr<Backend> decode_lane = nullptr);

  // A validated request joins the waiting queue (arrival = its timeline's arrival_ms).
  void add_request(std::unique_ptr<RequestState> request);
  // Ends the request with kAbort; unknown ids are ignored.
  void abort_request(const std::string& request_id, const std::string& why, double now_ms);
  void abort_all(const std::string& why, double now_ms);
  // Ends every request with kError and `why` (the backend is gone).
  void fail_all(const std::string& why, double now_ms);

  // schedule -> preempt -> continue the running -> admit -> submit -> collect
  // -> stream. `now_ms` is the call's start on the engine clock. Inline, the
  // step submitted is collected in the same call; with async scheduling it is
  // collected by the next call, after the next step has been planned and
  // submitted behind it. The report describes the step collected last in this
  // call.
  StepReport step(double now_ms);

  // Copies in flight count: a demotion outlives every request.
  bool has_work() const {
    return !running_.empty() || !waiting_.empty() || !in_flight_.empty() || kv_.num_copies_in_flight() > 0;
  }
  // Fills everything but the clock and the queue counters the Engine keeps.
  void fill_stats(EngineStats& stats, double now_ms) const;
  std::vector<RequestTimeline> take_finished_timelines();
  const BackendInfo& backend_info() const { return backend_->info(); }
  std::int32_t reserve_blocks() const { return sched_config_.reserve_blocks; }
  // Requests that left the waiting queue for the first time since the last call
  // (the Engine's queue limits count them down).
  struct Dequeued {
    std::int32_t num_requests = 0;
    std::int64_t num_prompt_tokens = 0;
  };
  Dequeued take_dequeued();
  // Request ids that ended since the last call (the Engine frees their names).
  std::vector<std::string> take_ended_ids();

  void check_invariants() const;

 private:
  // The lanes: kMain runs everything with one step loop, and the prefills
  // (admissions, chunks, host copies) with two; kDecode the decodes.
  static constexpr int kMain = 0, kDecode = 1;
  bool has_decode_lane() const { return decode_pipeline_ != nullptr; }
  StepPipeline& pipeline(int lane) { return lane == kMain ? pipeline_ : *decode_pipeline_; }
  // Which running requests a lane's plan sees (all of them with one loop).
  SchedState build_sched_state(double now_ms, int lane);
  void refresh_prefix_probes();
  // What the engine remembers of a submitted step until it is collected.
  struct InFlightStep {
    struct Entry {
      SequenceId seq_id = 0;
      std::int32_t num_computed_tokens = 0;  // position of its first new token
      std::int32_t num_new_tokens = 0;
      bool sample = false;
      bool is_decode = false;
    };
    std::vector<Entry> entries;  // batch order
    double submit_ms = 0.0;
    double not_before_ms = 0.0;  // a paced decode-lane step starts no sooner (EngineConfig::decode_lane_interval_ms)
    double predicted_step_ms = 0.0;
    std::int32_t num_preempted = 0;
    int lane = kMain;
  };
  // The step being built: the batch for the backend and its in-flight record.
  struct NextStep {
    Batch batch;
    InFlightStep record;
  };
  // A step collected from the pipeline, its tokens not yet streamed.
  struct CollectedStep {
    InFlightStep record;
    ExecutedStep executed;
    StepReport report;
  };
  class StepClock;

  // Plans the lane's next step and submits it (schedule, preempt, continue,
  // admit); false when it has nothing to run. Appends what it had to collect
  // first (a preemption waits for every step in flight) to `report`.
  bool plan_and_submit(int lane, double now_ms, const StepClock& clock, StepReport& report);
  // step() with a decode lane: plans the idle lanes, then collects the first to finish.
  StepReport step_lanes(double now_ms);
  // The lane whose step in flight finished first (waits for one).
  int wait_for_a_lane();
  // The same, or -1 once the clock reaches until_ms first.
  int wait_for_a_lane_until(const StepClock& clock, double until_ms);
  // When the decode lane may start its next step (its last start plus the interval).
  double decode_lane_due_ms() const;
  // Under the virtual clock: waits for every lane's step in flight, then the
  // lane whose step ends first on the clock. Else wait_for_a_lane().
  int first_to_end_on_the_clock();
  int next_lane_to_collect();
  // The lane's oldest step in flight (there must be one).
  std::deque<InFlightStep>::iterator oldest_in_flight(int lane);
  // No request waits, loads or has prompt left: only decodes (and finishing).
  bool nothing_to_prefill() const;
  // The lane a running request's next step belongs to: decodes on the decode
  // lane, unless the main lane takes them this round (decodes_on_main_lane_).
  int lane_of(const RequestState& r) const;

  // The phases of a step, in order.
  StepPlan schedule(double now_ms, int lane);
  // A running request gives its blocks back and waits again (recompute).
  // swap: its blocks are stored to the host tier first (KvCacheManager::swap_out).
  void preempt(SequenceId seq_id, bool swap);
  // Running requests take the blocks of their chunk, decodes first, and join
  // the step; one whose blocks cannot be had after all sits this step out.
  void continue_running(const StepPlan& plan, NextStep& next);
  // Waiting requests the plan starts take a seat, their prefix hit (matched
  // again: the cache may have changed since the plan) and their first chunk's
  // blocks; one whose blocks cannot be had stays waiting, its prefix probe
  // marked for a full redo. Returns how many planned admissions failed.
  std::int32_t admit(const StepPlan& plan, double now_ms, NextStep& next);
  void submit(NextStep next);
  // Waits for the lane's step in flight; confirms what it computed (lengths,
  // prefill timelines, the prefix cache) and fails the sequences that failed.
  CollectedStep collect(const StepClock& clock, int lane = kMain);
  // Appends the step's sampled tokens, checks stops and pushes to the streams.
  StepReport stream(const CollectedStep& step);
  // Requests whose loads all landed start running (or fail, if one failed).
  void settle_loads(double now_ms);
  // Feeds the step's shape and the backend's measured time to the step trace,
  // and to the online cost model when the step had the device alone and did
  // no one-time setup (StepOutput::setup_ms).
  void learn_step_cost(const InFlightStep& step, double start_ms, double measured_ms, double setup_ms, bool alone);

  // Adds the request's next num_new_tokens to the step and advances its lengths.
  void add_to_step(RequestState& r, std::int32_t num_new_tokens, NextStep& next);
  // How a request ends. `last_tokens` travel in the final event: the token
  // that stops a request reaches its reader together with the stop, so no
  // reader streams a stop token's text before it knows the token stopped it.
  struct Ending {
    FinishReason reason = FinishReason::kStop;
    std::optional<TokenId> stop_token;
    std::string message;
    std::vector<GeneratedToken> last_tokens;
  };
  void finish(RequestState& r, Ending ending, double now_ms);
  void end_all(FinishReason reason, const std::string& why, double now_ms);
  RequestState* find(SequenceId seq_id);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> decode_backend_;  // the decode lane's; null: one step loop
  std::shared_ptr<DoneSignal> done_signal_;  // both lanes' workers notify it; null: one loop
  StepPipeline pipeline_;              // runs batches on backend_; declared after it, so it stops first
  std::unique_ptr<StepPipeline> decode_pipeline_;  // runs batches on decode_backend_
  std::deque<InFlightStep> in_flight_;  // submitted, not collected; oldest first
  double last_step_end_ms_[2] = {0.0, 0.0};  // per lane: when the step it collected last ended
  double last_step_begin_ms_[2] = {-1e300, -1e300};  // per lane: when the step it collected last began
  // Requests that ended while a lane still computes them: their blocks go
  // back once that step is collected, so no step of the other lane is given
  // a block this one still writes.
  std::vector<SequenceId> frees_after_collect_;
  // This round's: the main lane was idle with nothing to prefill, so it runs the decodes.
  bool decodes_on_main_lane_ = false;
  // A decode longer than this runs on the main lane (EngineConfig::decode_lane_max_context, resolved).
  std::int32_t decode_lane_max_context_ = 0;
  std::shared_ptr<const CostModel> cost_model_;  // what the planner prices steps with
  // The same model when the online correction is on (config.online_cost_correction), else null.
  std::shared_ptr<OnlineCostModel> online_cost_model_;
  std::unique_ptr<StepTraceWriter> step_trace_;  // --step-trace; null = off
  EngineConfig config_;
  SchedConfig sched_config_;
  KvCacheManager kv_;
  std::unordered_map<SequenceId, std::unique_ptr<RequestState>> requests_;
  std::unordered_map<std::string, SequenceId> ids_;
  std::vector<SequenceId> running_;  // admission order
  std::deque<SequenceId> waiting_;   // arrival order
  std::vector<SequenceId> loading_;  // running, waiting for their prefix to load from the host tier
  std::uint64_t step_index_ = 0;
  // The last plan's StepPlan::decode_overrun_ms, for the next plan's state.
  double decode_overrun_ms_ = 0.0;
  // Per-step scratch, kept to reuse allocations.
  std::vector<SchedRequest> sched_running_;
  std::vector<SchedRequest> sched_waiting_;
  std::vector<RequestTimeline> finished_timelines_;
  std::vector<std::string> ended_ids_;
  Dequeued dequeued_;
  // Counters.
  std::int64_t num_steps_ = 0;
  double last_step_ms_ = 0.0;
  double max_step_ms_seen_ = 0.0;
  double total_step_ms_ = 0.0;
  std::int64_t num_prompt_tokens_computed_ = 0;
  std::int64_t num_generated_tokens_ = 0;
  std::int64_t num_preemptions_ = 0;
  std::int64_t num_swap_preemptions_ = 0;
  std::int64_t num_dropped_sequence_steps_ = 0;
  std::int64_t num_pipeline_waits_ = 0;
  std::int64_t num_long_steps_ = 0;
  std::int64_t num_decode_lane_steps_ = 0;
  std::int64_t num_main_lane_decode_steps_ = 0;
  std::int64_t num_steps_beside_other_lane_ = 0;
  std::int64_t num_finished_ = 0;
  std::int64_t num_aborted_ = 0;
  std::int64_t num_failed_ = 0;
  std::int64_t num_loads_done_ = 0;
  std::int64_t num_host_hit_tokens_recomputed_ = 0;
  double total_load_ms_ = 0.0;
};

}  // namespace sluice
