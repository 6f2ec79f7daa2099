#include "sluice/engine/step_pipeline.h"

#include <exception>

#include "sluice/common/check.h"

namespace sluice {

SubmittedBatch SubmittedBatch::attached(Batch batch, std::vector<LateMask> late_masks) {
  SubmittedBatch submitted;
  submitted.batch_ = std::move(batch);
  submitted.late_masks_ = std::move(late_masks);
  return submitted;
}

SubmittedBatch SubmittedBatch::detached(const Batch& batch, std::vector<std::shared_ptr<TokenLog>> logs,
                                        std::vector<LateMask> late_masks) {
  SLUICE_CHECK_EQ(logs.size(), batch.sequences.size());
  SubmittedBatch submitted;
  std::size_t num_blocks = 0, num_mask_words = 0;
  for (const SequenceStep& s : batch.sequences) {
    num_blocks += s.block_table.size();
    num_mask_words += s.allowed_tokens.size();
  }
  // Sized once: the spans below point into these vectors.
  submitted.block_storage_.reserve(num_blocks);
  submitted.mask_storage_.reserve(num_mask_words);
  submitted.batch_.sequences = batch.sequences;
  submitted.batch_.copies = batch.copies;
  for (SequenceStep& s : submitted.batch_.sequences) {
    auto copy = [](auto& storage, auto source) {
      const std::size_t offset = storage.size();
      storage.insert(storage.end(), source.begin(), source.end());
      return std::span(storage.data() + offset, source.size());
    };
    s.tokens = {};  // from the log, when the batch runs
    s.block_table = copy(submitted.block_storage_, s.block_table);
    s.allowed_tokens = copy(submitted.mask_storage_, s.allowed_tokens);
  }
  for (LateMask& m : late_masks) {
    const std::span<const std::uint64_t> copied = submitted.batch_.sequences.at(m.sequence_index).allowed_tokens;
    SLUICE_CHECK_EQ(copied.size(), m.words.size());
    m.words = {submitted.mask_storage_.data() + (copied.data() - submitted.mask_storage_.data()), copied.size()};
  }
  for (const auto& log : logs) SLUICE_CHECK(log != nullptr);
  submitted.logs_ = std::move(logs);
  submitted.late_masks_ = std::move(late_masks);
  return submitted;
}

std::uint64_t DoneSignal::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

void DoneSignal::wait_past(std::uint64_t seen) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return count_ > seen; });
}

bool DoneSignal::wait_past_until(std::uint64_t seen, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] { return count_ > seen; });
}

void DoneSignal::notify() {
  {
    std::lock_guard lock(mutex_);
    ++count_;
  }
  changed_.notify_all();
}

StepPipeline::StepPipeline(Backend& backend, bool use_worker_thread, std::shared_ptr<DoneSignal> done_signal)
    : backend_(backend), done_signal_(std::move(done_signal)) {
  SLUICE_CHECK(use_worker_thread || done_signal_ == nullptr);
  if (use_worker_thread) worker_ = std::thread([this] { work(); });
}

bool StepPipeline::has_done() const {
  SLUICE_CHECK(worker_.joinable());
  std::lock_guard lock(mutex_);
  return !done_.empty();
}

double StepPipeline::next_step_time_ms() const {
  SLUICE_CHECK(worker_.joinable());
  std::lock_guard lock(mutex_);
  SLUICE_CHECK(!done_.empty());
  return done_.front().step_time_ms;
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
    if (done_signal_) done_signal_->notify();
  }
}

ExecutedStep StepPipeline::run(SubmittedBatch& submitted) {
  Batch& batch = submitted.batch_;
  const std::size_t n = batch.sequences.size();
  const bool detached = !submitted.logs_.empty();
  ExecutedStep step{.outputs = std::vector<SequenceOutput>(n), .failures = std::vector<std::optional<std::string>>(n)};
  std::vector<std::size_t> index;  // position in what runs -> position in the submitted batch
  index.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    SequenceStep& s = batch.sequences[i];
    if (detached) {
      const TokenLog& log = *submitted.logs_[i];
      // A log one token short: the step before sampled nothing for the sequence
      // (it failed there, and its request has already ended with that error).
      if (log.num_tokens() < s.end_position()) {
        step.failures[i] = "backend error: its previous step sampled no token";
        continue;
      }
      s.tokens = log.first(s.end_position());
    }
    index.push_back(i);
  }
  // Filled once, when the backend first asks (isolated retries ask again).
  bool masks_filled = submitted.late_masks_.empty();
  if (!masks_filled) {
    batch.late_masks = [&submitted, &masks_filled, &step] {
      if (masks_filled) return;
      masks_filled = true;
      for (const LateMask& m : submitted.late_masks_)
        if (!step.failures[m.sequence_index]) m.constraint->fill_allowed(m.words);
    };
  }
  const bool all_run = index.size() == n;
  Batch subset;  // the runnable sequences, when some cannot run
  if (!all_run)
    for (std::size_t i : index) subset.sequences.push_back(batch.sequences[i]);
  subset.late_masks = batch.late_masks;
  subset.copies = batch.copies;
  // A batch of copies alone (or of none: a wait for copies) still runs.
  const bool runs = !index.empty() || n == 0;
  ExecutedStep ran = runs ? run_isolating_failures(all_run ? batch : subset) : run_copies_alone(batch.copies);
  batch.late_masks = nullptr;  // it refers to this frame
  step.step_time_ms = ran.step_time_ms;
  step.setup_ms = ran.setup_ms;
  step.completed_copies = std::move(ran.completed_copies);
  for (std::size_t k = 0; k < index.size(); ++k) {
    step.failures[index[k]] = std::move(ran.failures[k]);
    step.outputs[index[k]] = std::move(ran.outputs[k]);
  }
  // The constraints advance past what was sampled; a backend that sampled
  // without asking for the masks sampled from zeroed ones.
  for (const LateMask& m : submitted.late_masks_) {
    std::optional<std::string>& failure = step.failures[m.sequence_index];
    const std::optional<TokenId>& token = step.outputs[m.sequence_index].token;
    if (failure || !token) continue;
    if (!masks_filled) {
      failure = "backend error: the backend sampled without filling the late masks";
    } else if (Status accepted = m.constraint->accept(*token); !accepted.ok()) {
      failure = accepted.error_message();
    }
  }
  if (!detached) return step;
  for (std::size_t i = 0; i < n; ++i) {
    if (step.failures[i] || !step.outputs[i].token) continue;
    TokenLog& log = *submitted.logs_[i];
    SLUICE_CHECK_EQ(log.num_tokens(), batch.sequences[i].end_position());
    log.append(*step.outputs[i].token);
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

ExecutedStep StepPipeline::run_copies_alone(const std::vector<KvBlockCopy>& copies) {
  ExecutedStep step;
  if (copies.empty()) return step;
  Batch batch;
  batch.copies = copies;
  Result<StepOutput> output = execute_guarded(backend_, batch);
  if (output.ok()) {
    step.step_time_ms = output->step_time_ms;
    step.completed_copies = std::move(output->completed_copies);
    return step;
  }
  // Nothing says they ran: they failed (a load's request fails, a store is dropped).
  for (const KvBlockCopy& c : copies) step.completed_copies.push_back({.id = c.id, .ok = false});
  return step;
}

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
    step.setup_ms = output->setup_ms;
    step.completed_copies = std::move(output->completed_copies);
    return step;
  }
  // The copies go again alone (a copy is idempotent: its blocks are nobody
  // else's until it completes), then each sequence alone, without them.
  step.completed_copies = run_copies_alone(batch.copies).completed_copies;
  if (n == 1) {
    step.failures[0] = "backend error: " + output.error_message();
    return step;
  }
  for (std::size_t i = 0; i < n; ++i) {
    Batch single;
    single.sequences.push_back(batch.sequences[i]);
    single.late_masks = batch.late_masks;
    Result<StepOutput> alone = execute_guarded(backend_, single);
    if (!alone.ok()) {
      step.failures[i] = "backend error: " + alone.error_message();
      continue;
    }
    SLUICE_CHECK_EQ(alone->sequences.size(), 1u);
    step.step_time_ms += alone->step_time_ms;
    // Not the batch's shape: its time teaches the cost model nothing.
    step.setup_ms = step.step_time_ms;
    step.outputs[i] = std::move(alone->sequences[0]);
  }
  return step;
}

}  // namespace sluice
