// StepPipeline: how the engine's batches reach the backend.
//
// Inline (the default) the backend runs a batch when the engine collects it,
// on the engine thread. With a worker (--async-scheduling) a thread of its own
// runs the batches in submission order, so the engine thread plans step N+1,
// and streams step N-1's tokens, while the backend computes step N.
//
// A batch planned while the one before it is in flight cannot know the tokens
// that one is sampling. Such a sequence's last input token is *pending*: the
// batch keeps a slot for it, and the worker fills the slot with the token the
// previous batch sampled for that sequence before the backend sees the batch.
// So backends never learn about pipelining: each gets an ordinary Batch.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sluice/backend/backend.h"

namespace sluice {

// A batch handed to the pipeline. Detached batches own what their spans point
// at: the engine's token lists, block tables and masks change while a batch
// is in flight. An attached batch points into the engine's state, which must
// stay unchanged until it is collected (the inline pipeline).
class SubmittedBatch {
 public:
  // Points into the caller's state; no pending inputs allowed.
  static SubmittedBatch attached(Batch batch);
  // Copies every span. pending_last_token[i]: sequence i's last new token is
  // the one the previous batch samples for it (its `tokens` end one short).
  static SubmittedBatch detached(const Batch& batch, const std::vector<bool>& pending_last_token);

  const Batch& batch() const { return batch_; }

 private:
  friend class StepPipeline;
  struct PendingInput {
    std::size_t sequence_index = 0;  // into batch_.sequences
    std::size_t token_slot = 0;      // into token_storage_
  };
  Batch batch_;
  std::vector<PendingInput> pending_inputs_;
  std::vector<TokenId> token_storage_;
  std::vector<BlockId> block_storage_;
  std::vector<std::uint64_t> mask_storage_;
};

// What came of one batch, in its sequence order: each sequence either ran
// (outputs[i]) or failed on its own (failures[i] says why).
struct ExecutedStep {
  std::vector<SequenceOutput> outputs;
  std::vector<std::optional<std::string>> failures;
  double step_time_ms = 0.0;  // the backend's: measured, or predicted (sim)
};

class StepPipeline {
 public:
  StepPipeline(Backend& backend, bool use_worker_thread);
  ~StepPipeline();
  StepPipeline(const StepPipeline&) = delete;
  StepPipeline& operator=(const StepPipeline&) = delete;

  void submit(SubmittedBatch batch);
  // Waits for the oldest submitted batch and returns what came of it.
  ExecutedStep collect();
  std::size_t num_in_flight() const { return num_in_flight_; }

 private:
  // Fills pending inputs, runs the batch (isolating failing sequences), and
  // remembers what it sampled for the next batch's pending inputs.
  ExecutedStep run(SubmittedBatch& submitted);
  ExecutedStep run_isolating_failures(const Batch& batch);
  void work();

  Backend& backend_;
  // Tokens the last batch run sampled, by sequence (the thread that runs batches only).
  std::unordered_map<SequenceId, TokenId> last_sampled_;
  std::size_t num_in_flight_ = 0;  // engine thread only

  std::mutex mutex_;  // guards the three below
  std::condition_variable changed_;
  std::deque<SubmittedBatch> queue_;  // submitted, not yet run
  std::deque<ExecutedStep> done_;     // run, not yet collected
  bool stopping_ = false;
  std::thread worker_;  // absent: inline
};

}  // namespace sluice
