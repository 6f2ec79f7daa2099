// StepPipeline: how the engine's batches reach the backend.
//
// Inline (the default) the backend runs a batch when the engine collects it,
// on the engine thread. With a worker (--async-scheduling) a thread of its own
// runs the batches in submission order, so the engine thread plans step N+1,
// and streams step N-1's tokens, while the backend computes step N.
//
// A batch planned while the one before it is in flight cannot know the tokens
// that one is sampling. Under async scheduling every request's tokens live in
// a TokenLog that the worker appends each sampled token to, so the token a
// decode consumes is in its log before the decode runs; a batch names the logs
// and the worker points each sequence's `tokens` into its log when it runs
// the batch. So backends never learn about pipelining: each gets an ordinary
// Batch.
//
// In both modes the pipeline drives structured-output constraints (the
// worker's thread, or the engine's inline): it fills constrained masks late,
// through Batch::late_masks, which the backend calls once the step's forward
// is launched, so the mask's cost hides under the GPU's work; and it feeds
// each sampled token back to its constraint right after the step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "sluice/backend/backend.h"
#include "sluice/engine/token_constraint.h"
#include "sluice/engine/token_log.h"

namespace sluice {

// A batch handed to the pipeline. An attached batch points into the engine's
// state, which must stay unchanged until it is collected (the inline
// pipeline). A detached one owns copies of its block tables and masks (the
// engine changes those while it is in flight) and reads its tokens from the
// requests' logs.
// A constrained sampled sequence's mask, filled when the backend asks for it.
struct LateMask {
  std::size_t sequence_index = 0;  // into the batch's sequences
  std::shared_ptr<TokenConstraint> constraint;  // shared: the request may end while the batch is in flight
  std::span<std::uint64_t> words;               // the sequence's allowed_tokens, zeroed
};

class SubmittedBatch {
 public:
  // The batch and its late masks point into the caller's state.
  static SubmittedBatch attached(Batch batch, std::vector<LateMask> late_masks);
  // logs[i]: batch.sequences[i]'s tokens (its `tokens` span is not read). The
  // late masks are filled into the batch's own copies of the masks.
  static SubmittedBatch detached(const Batch& batch, std::vector<std::shared_ptr<TokenLog>> logs,
                                 std::vector<LateMask> late_masks);

 private:
  friend class StepPipeline;
  Batch batch_;
  std::vector<std::shared_ptr<TokenLog>> logs_;  // [batch_.sequences]; empty when attached
  std::vector<LateMask> late_masks_;
  std::vector<BlockId> block_storage_;
  std::vector<std::uint64_t> mask_storage_;
};

// What came of one batch, in its sequence order: each sequence either ran
// (outputs[i]) or failed on its own (failures[i]: the message its request ends with).
struct ExecutedStep {
  std::vector<SequenceOutput> outputs;
  std::vector<std::optional<std::string>> failures;
  std::vector<KvCopyCompletion> completed_copies;
  double step_time_ms = 0.0;  // the backend's: measured, or predicted (sim)
  double setup_ms = 0.0;      // StepOutput::setup_ms; also set when failures split the batch
};

// Bumped by every pipeline that shares it when one of its batches is done, so
// the engine thread can wait for whichever of its lanes finishes first.
class DoneSignal {
 public:
  std::uint64_t count() const;
  // Returns once count() > seen.
  void wait_past(std::uint64_t seen);
  // The same, or at `deadline`: false when the deadline came first.
  bool wait_past_until(std::uint64_t seen, std::chrono::steady_clock::time_point deadline);
  void notify();

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t count_ = 0;
};

class StepPipeline {
 public:
  // done_signal (with a worker thread only): notified after each batch is run.
  StepPipeline(Backend& backend, bool use_worker_thread, std::shared_ptr<DoneSignal> done_signal = nullptr);
  ~StepPipeline();
  StepPipeline(const StepPipeline&) = delete;
  StepPipeline& operator=(const StepPipeline&) = delete;

  void submit(SubmittedBatch batch);
  // Waits for the oldest submitted batch and returns what came of it.
  ExecutedStep collect();
  std::size_t num_in_flight() const { return num_in_flight_; }
  // With a worker: whether collect() would return at once.
  bool has_done() const;
  // With a worker and has_done(): the step time of the batch collect() returns next.
  double next_step_time_ms() const;

 private:
  // Points the sequences into their logs, runs the batch (isolating failing
  // sequences; the backend fills the late masks), then feeds what it sampled
  // to the constraints and (detached) appends it to the logs.
  ExecutedStep run(SubmittedBatch& submitted);
  ExecutedStep run_isolating_failures(const Batch& batch);
  // Starts copies in a batch of their own (after a failed batch, or when no sequence can run).
  ExecutedStep run_copies_alone(const std::vector<KvBlockCopy>& copies);
  void work();

  Backend& backend_;
  std::size_t num_in_flight_ = 0;  // engine thread only

  std::shared_ptr<DoneSignal> done_signal_;
  mutable std::mutex mutex_;  // guards the three below
  std::condition_variable changed_;
  std::deque<SubmittedBatch> queue_;  // submitted, not yet run
  std::deque<ExecutedStep> done_;     // run, not yet collected
  bool stopping_ = false;
  std::thread worker_;  // absent: inline
};

}  // namespace sluice
