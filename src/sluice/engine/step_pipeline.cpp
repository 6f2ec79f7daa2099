#include "sluice/engine/step_pipeline.h"

#include <exception>

#include "sluice/common/check.h"

namespace sluice {

SubmittedBatch SubmittedBatch::attached(Batch batch) {
  SubmittedBatch submitted;
  submitted.batch_ = std::move(batch);
  return submitted;
}

SubmittedBatch SubmittedBatch::detached(const Batch& batch, const std::vector<bool>& pending_last_token) {
  SLUICE_CHECK_EQ(pending_last_token.size(), batch.sequences.size());
  SubmittedBatch submitted;
  std::size_t num_tokens = 0, num_blocks = 0, num_mask_words = 0;
  // Backends read tokens [0, end) only: later prompt tokens are not copied.
  auto num_known_tokens = [&](std::size_t i) {
    const SequenceStep& s = batch.sequences[i];
    const std::size_t known = static_cast<std::size_t>(s.end_position()) - (pending_last_token[i] ? 1 : 0);
    SLUICE_CHECK_LE(known, s.tokens.size());
    if (pending_last_token[i]) SLUICE_CHECK_EQ(s.tokens.size(), known);
    return known;
  };
  for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceStep& s = batch.sequences[i];
    num_tokens += static_cast<std::size_t>(s.end_position());
    num_blocks += s.block_table.size();
    num_mask_words += s.allowed_tokens.size();
  }
  // Sized once: the spans below point into these vectors.
  submitted.token_storage_.reserve(num_tokens);
  submitted.block_storage_.reserve(num_blocks);
  submitted.mask_storage_.reserve(num_mask_words);
  submitted.batch_.sequences = batch.sequences;
  for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
    SequenceStep& s = submitted.batch_.sequences[i];
    auto copy = [](auto& storage, auto source) {
      const std::size_t offset = storage.size();
      storage.insert(storage.end(), source.begin(), source.end());
      return std::span(storage.data() + offset, source.size());
    };
    const std::size_t token_offset = submitted.token_storage_.size();
    std::span<const TokenId> tokens = copy(submitted.token_storage_, s.tokens.first(num_known_tokens(i)));
    if (pending_last_token[i]) {
      submitted.pending_inputs_.push_back({.sequence_index = i, .token_slot = submitted.token_storage_.size()});
      submitted.token_storage_.push_back(0);  // filled in by the pipeline before the batch runs
      tokens = std::span<const TokenId>(submitted.token_storage_.data() + token_offset, tokens.size() + 1);
    }
    s.tokens = tokens;
    s.block_table = copy(submitted.block_storage_, s.block_table);
    s.allowed_tokens = copy(submitted.mask_storage_, s.allowed_tokens);
  }
  return submitted;
}

StepPipeline::StepPipeline(Backend& backend, bool use_worker_thread) : backend_(backend) {
  if (use_worker_thread) worker_ = std::thread([this] { work(); });
}

StepPipeline::~StepPipeline() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void StepPipeline::submit(SubmittedBatch batch) {
  SLUICE_CHECK_MSG(worker_.joinable() || batch.pending_inputs_.empty(),
                   "a pending input needs the batch before it to have run: only a worker pipelines");
  ++num_in_flight_;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(batch));
  }
  changed_.notify_all();
}

ExecutedStep StepPipeline::collect() {
  SLUICE_CHECK(num_in_flight_ > 0);
  --num_in_flight_;
  if (!worker_.joinable()) {
    SubmittedBatch batch = std::move(queue_.front());
    queue_.pop_front();
    return run(batch);
  }
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !done_.empty(); });
  ExecutedStep step = std::move(done_.front());
  done_.pop_front();
  return step;
}

void StepPipeline::work() {
  for (;;) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    SubmittedBatch batch = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    ExecutedStep step = run(batch);
    lock.lock();
    done_.push_back(std::move(step));
    lock.unlock();
    changed_.notify_all();
  }
}

ExecutedStep StepPipeline::run(SubmittedBatch& submitted) {
  const std::size_t n = submitted.batch_.sequences.size();
  ExecutedStep step{.outputs = std::vector<SequenceOutput>(n), .failures = std::vector<std::optional<std::string>>(n)};
  // Pending inputs come from the batch run just before this one; a sequence
  // whose token is not there (that step failed for it) cannot run.
  std::vector<bool> runnable(n, true);
  for (const SubmittedBatch::PendingInput& p : submitted.pending_inputs_) {
    const SequenceId id = submitted.batch_.sequences[p.sequence_index].seq_id;
    const auto it = last_sampled_.find(id);
    if (it == last_sampled_.end()) {
      runnable[p.sequence_index] = false;
      step.failures[p.sequence_index] = "its previous step sampled no token";
      continue;
    }
    submitted.token_storage_[p.token_slot] = it->second;
  }
  std::vector<std::size_t> index;  // position in what runs -> position in the submitted batch
  index.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    if (runnable[i]) index.push_back(i);
  const bool all_run = index.size() == n;
  Batch subset;  // the runnable sequences, when some cannot run
  if (!all_run)
    for (std::size_t i : index) subset.sequences.push_back(submitted.batch_.sequences[i]);
  ExecutedStep ran = index.empty() ? ExecutedStep{} : run_isolating_failures(all_run ? submitted.batch_ : subset);
  step.step_time_ms = ran.step_time_ms;
  last_sampled_.clear();
  last_sampled_.reserve(n);
  for (std::size_t k = 0; k < index.size(); ++k) {
    const std::size_t i = index[k];
    step.failures[i] = std::move(ran.failures[k]);
    step.outputs[i] = std::move(ran.outputs[k]);
    if (!step.failures[i] && step.outputs[i].token) last_sampled_[step.outputs[i].seq_id] = *step.outputs[i].token;
  }
  return step;
}

namespace {

// Exceptions stop here: a backend that throws fails the batch, not the thread.
Result<StepOutput> execute_guarded(Backend& backend, const Batch& batch) {
  try {
    return backend.execute(batch);
  } catch (const std::exception& e) {
    return Error{std::string("backend threw: ") + e.what()};
  }
}

}  // namespace

// The backend failed the batch: find which sequences fail on their own. They
// fail; the others' results from running alone stand (KV writes at the same
// positions are idempotent, so the failed attempt corrupted nothing).
ExecutedStep StepPipeline::run_isolating_failures(const Batch& batch) {
  const std::size_t n = batch.sequences.size();
  ExecutedStep step{.outputs = std::vector<SequenceOutput>(n), .failures = std::vector<std::optional<std::string>>(n)};
  Result<StepOutput> output = execute_guarded(backend_, batch);
  if (output.ok()) {
    SLUICE_CHECK_EQ(output->sequences.size(), n);
    step.outputs = std::move(output->sequences);
    step.step_time_ms = output->step_time_ms;
    return step;
  }
  if (n == 1) {
    step.failures[0] = output.error_message();
    return step;
  }
  for (std::size_t i = 0; i < n; ++i) {
    Batch single;
    single.sequences.push_back(batch.sequences[i]);
    Result<StepOutput> alone = execute_guarded(backend_, single);
    if (!alone.ok()) {
      step.failures[i] = alone.error_message();
      continue;
    }
    SLUICE_CHECK_EQ(alone->sequences.size(), 1u);
    step.step_time_ms += alone->step_time_ms;
    step.outputs[i] = std::move(alone->sequences[0]);
  }
  return step;
}

}  // namespace sluice
