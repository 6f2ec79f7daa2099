// Async scheduling: the engine plans and submits step N+1 before step N is
// collected. A gated backend proves the overlap (step() returns while the
// backend is still inside the step it was given, and the next batch reaches
// the backend before the engine has seen the token it consumes); the
// KV-checking backend underneath proves that the token the next step runs is
// the right one, and counts the step wasted on a late stop.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "engine_test_support.h"
#include "kv_checking_backend.h"
#include "sluice/engine/engine.h"

namespace sluice {
namespace {

using namespace testing;  // engine_test_support.h, kv_checking_backend.h

constexpr auto kPatience = std::chrono::seconds(20);  // a bound on waits that only a broken pipeline reaches

std::vector<TokenId> poll_tokens(RequestStream& stream, std::optional<FinishReason>* finish = nullptr) {
  std::vector<TokenId> tokens;
  while (std::optional<RequestOutput> out = stream.poll()) {
    for (const GeneratedToken& t : out->tokens) tokens.push_back(t.token);
    if (out->finished() && finish) *finish = out->finish_reason;
  }
  return tokens;
}

// Runs each step only once the test has opened the gate that far; records
// how many steps it has started and finished, and the batches it was given.
class GatedBackend final : public Backend {
 public:
  explicit GatedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const BackendInfo& info() const override { return inner_->info(); }

  Result<StepOutput> execute(const Batch& batch) override {
    std::unique_lock lock(mutex_);
    ++num_started_;
    batch_sizes_.push_back(batch.sequences.size());
    changed_.notify_all();
    if (!changed_.wait_for(lock, kPatience, [&] { return num_finished_ < num_allowed_; })) {
      return Error{"gate never opened"};
    }
    lock.unlock();
    Result<StepOutput> out = inner_->execute(batch);
    lock.lock();
    ++num_finished_;
    changed_.notify_all();
    return out;
  }

  void allow(std::int64_t num_steps) {
    std::lock_guard lock(mutex_);
    num_allowed_ = num_steps;
    changed_.notify_all();
  }
  // Waits until `n` steps have started; false if that never happens.
  bool wait_started(std::int64_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kPatience, [&] { return num_started_ >= n; });
  }
  std::int64_t num_finished() {
    std::lock_guard lock(mutex_);
    return num_finished_;
  }

 private:
  std::unique_ptr<Backend> inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::int64_t num_allowed_ = 0;
  std::int64_t num_started_ = 0;
  std::int64_t num_finished_ = 0;
  std::vector<std::size_t> batch_sizes_;
};

TEST(AsyncScheduling, TheNextStepIsSubmittedWhileTheCurrentOneRuns) {
  auto gated = std::make_unique<GatedBackend>(std::make_unique<KvCheckingBackend>(64, kBlock, 4096));
  GatedBackend& backend = *gated;
  Engine engine(std::move(gated), nullptr, small_config(/*async_scheduling=*/true));
  const auto prompt = tokens_from(6, 3);
  auto stream = engine.submit(request("a", prompt, 4));
  ASSERT_TRUE(stream.ok()) << stream.error_message();

  // Step 1 (the prefill) is submitted; step() returns with the backend held inside it.
  engine.step();
  ASSERT_TRUE(backend.wait_started(1));
  EXPECT_EQ(backend.num_finished(), 0);
  EXPECT_TRUE(poll_tokens(**stream).empty());
  engine.check_invariants();

  // Step 2 (the first decode) is planned and submitted before step 1 is
  // collected: it reaches the backend while the engine has streamed only
  // step 1's token, and its input is that token, which the worker appended to the request's log.
  backend.allow(1);
  engine.step();
  ASSERT_TRUE(backend.wait_started(2));
  EXPECT_EQ(backend.num_finished(), 1);
  const std::vector<TokenId> expected = reference_generate(prompt, 4);
  EXPECT_EQ(poll_tokens(**stream), std::vector<TokenId>{expected[0]});

  backend.allow(1000);
  std::vector<TokenId> rest;
  std::optional<FinishReason> finish;
  for (int i = 0; i < 50 && engine.has_work(); ++i) {
    engine.step();
    engine.check_invariants();
    for (TokenId t : poll_tokens(**stream, &finish)) rest.push_back(t);
  }
  EXPECT_EQ(rest, std::vector<TokenId>(expected.begin() + 1, expected.end()));
  EXPECT_EQ(finish, FinishReason::kLength);
  // A length stop is known in advance: no step is wasted (1 prefill + 3 decodes).
  EXPECT_EQ(backend.num_finished(), 4);
  EXPECT_EQ(engine.stats().num_free_kv_blocks, engine.stats().num_kv_blocks);
}

struct StopRun {
  std::vector<TokenId> tokens;
  std::optional<FinishReason> finish;
  std::int64_t num_backend_steps = 0;
  std::int64_t num_dropped_sequence_steps = 0;
};

StopRun run_until_stop_token(bool async_scheduling, const std::vector<TokenId>& prompt, TokenId stop) {
  auto kv = std::make_unique<KvCheckingBackend>(64, kBlock, 4096);
  const KvCheckingBackend& backend = *kv;
  Engine engine(std::move(kv), nullptr, small_config(async_scheduling));
  EngineRequest r = request("stop", prompt, 20);
  r.stop_token_ids = {stop};
  auto stream = engine.submit(r);
  EXPECT_TRUE(stream.ok());
  StopRun run;
  for (int i = 0; i < 100 && engine.has_work(); ++i) {
    engine.step();
    engine.check_invariants();
    for (TokenId t : poll_tokens(**stream, &run.finish)) run.tokens.push_back(t);
  }
  EXPECT_EQ(engine.stats().num_free_kv_blocks, engine.stats().num_kv_blocks);
  run.num_backend_steps = backend.num_steps();
  run.num_dropped_sequence_steps = engine.stats().num_dropped_sequence_steps;
  return run;
}

TEST(AsyncScheduling, AStopTokenIsSeenOneStepLateAndTheExtraStepIsDropped) {
  const auto prompt = tokens_from(5, 9);
  const std::vector<TokenId> free_run = reference_generate(prompt, 20);
  const TokenId third = free_run[2];
  ASSERT_EQ(std::find(free_run.begin(), free_run.begin() + 2, third), free_run.begin() + 2);
  const StopRun inline_run = run_until_stop_token(false, prompt, third);
  const StopRun async_run = run_until_stop_token(true, prompt, third);
  const std::vector<TokenId> expected(free_run.begin(), free_run.begin() + 3);
  EXPECT_EQ(inline_run.tokens, expected);
  EXPECT_EQ(async_run.tokens, expected);
  EXPECT_EQ(async_run.finish, FinishReason::kStop);
  EXPECT_EQ(inline_run.num_backend_steps, 3);  // prefill + 2 decodes
  EXPECT_EQ(async_run.num_backend_steps, 4);   // + the decode planned before the stop was seen
  EXPECT_EQ(inline_run.num_dropped_sequence_steps, 0);
  EXPECT_EQ(async_run.num_dropped_sequence_steps, 1);  // counted, for /metrics
}

TEST(AsyncScheduling, AFailedStepFailsTheRequestAndItsPendingNextStep) {
  constexpr TokenId kPoison = 999;
  auto kv = std::make_unique<KvCheckingBackend>(128, kBlock, 4096, kPoison);
  Engine engine(std::move(kv), nullptr, small_config(/*async_scheduling=*/true));
  const auto good_prompt = tokens_from(6, 20);
  auto good = engine.submit(request("good", good_prompt, 6));
  ASSERT_TRUE(good.ok());
  engine.step();  // good's prefill in flight
  // Its prompt holds the poison: its prefill fails in the batch that runs
  // good's first decode (whose input is pending), and the decode planned for
  // it before the failure was seen is dropped.
  std::vector<TokenId> bad_prompt = tokens_from(6, 0);
  bad_prompt[2] = kPoison;
  auto bad = engine.submit(request("bad", bad_prompt, 6));
  ASSERT_TRUE(bad.ok());
  std::optional<FinishReason> good_finish, bad_finish;
  std::vector<TokenId> good_tokens;
  for (int i = 0; i < 100 && engine.has_work(); ++i) {
    engine.step();
    engine.check_invariants();
    for (TokenId t : poll_tokens(**good, &good_finish)) good_tokens.push_back(t);
    poll_tokens(**bad, &bad_finish);
  }
  EXPECT_EQ(good_tokens, reference_generate(good_prompt, 6));
  EXPECT_EQ(good_finish, FinishReason::kLength);
  EXPECT_EQ(bad_finish, FinishReason::kError);
  EXPECT_EQ(engine.stats().num_requests_failed, 1);
  EXPECT_EQ(engine.stats().num_free_kv_blocks, engine.stats().num_kv_blocks);
}

TEST(AsyncScheduling, AbortWhileAStepIsInFlightDropsItsResult) {
  Engine engine(std::make_unique<KvCheckingBackend>(128, kBlock, 4096), nullptr,
                small_config(/*async_scheduling=*/true));
  const auto keep_prompt = tokens_from(7, 40);
  auto gone = engine.submit(request("gone", tokens_from(9, 1), 50));
  auto keep = engine.submit(request("keep", keep_prompt, 8));
  ASSERT_TRUE(gone.ok() && keep.ok());
  engine.step();
  engine.step();  // both decoding, a step in flight that samples for both
  engine.abort("gone");
  std::optional<FinishReason> gone_finish, keep_finish;
  std::vector<TokenId> keep_tokens;
  for (int i = 0; i < 100 && engine.has_work(); ++i) {
    engine.step();
    engine.check_invariants();
    for (TokenId t : poll_tokens(**keep, &keep_finish)) keep_tokens.push_back(t);
    poll_tokens(**gone, &gone_finish);
  }
  EXPECT_EQ(gone_finish, FinishReason::kAbort);
  EXPECT_EQ(keep_tokens, reference_generate(keep_prompt, 8));
  EXPECT_EQ(engine.stats().num_free_kv_blocks, engine.stats().num_kv_blocks);
}

TEST(AsyncScheduling, AFinishingRequestKeepsItsSeatUntilCollected) {
  // max_num_seqs 1: the second request may start only once the first has
  // ended, which the engine learns one step after planning past it.
  EngineConfig c = small_config(/*async_scheduling=*/true);
  c.max_num_seqs = 1;
  Engine engine(std::make_unique<KvCheckingBackend>(128, kBlock, 4096), nullptr, c);
  const auto first_prompt = tokens_from(5, 1), second_prompt = tokens_from(5, 60);
  auto first = engine.submit(request("first", first_prompt, 3));
  auto second = engine.submit(request("second", second_prompt, 3));
  ASSERT_TRUE(first.ok() && second.ok());
  std::vector<TokenId> first_tokens, second_tokens;
  for (int i = 0; i < 100 && engine.has_work(); ++i) {
    engine.step();
    engine.check_invariants();  // admit() asserts running <= max_num_seqs while it plans
    for (TokenId t : poll_tokens(**first)) first_tokens.push_back(t);
    for (TokenId t : poll_tokens(**second)) second_tokens.push_back(t);
  }
  EXPECT_EQ(first_tokens, reference_generate(first_prompt, 3));
  EXPECT_EQ(second_tokens, reference_generate(second_prompt, 3));
}

}  // namespace
}  // namespace sluice
