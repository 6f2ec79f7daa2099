// Engine behaviour on the KV-checking fake backend, synchronous mode with the
// virtual clock: each test drives steps and checks outputs against the
// single-sequence oracle and timelines against the configuration. The tests
// of EngineInBothModes run inline and with async scheduling.
#include "sluice/engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>

#include <map>
#include <thread>

#include "engine_test_support.h"
#include "kv_checking_backend.h"

namespace sluice {
namespace {

using namespace testing;  // engine_test_support.h, kv_checking_backend.h

std::unique_ptr<Engine> make_engine(EngineConfig config, std::int32_t num_blocks = 256, TokenId poison = -1) {
  return std::make_unique<Engine>(std::make_unique<KvCheckingBackend>(num_blocks, kBlock, 4096, poison), nullptr,
                                  config);
}

struct Collected {
  std::vector<TokenId> tokens;
  std::optional<FinishReason> finish;
  std::string error;
  std::int32_t num_cached_tokens = 0;
  std::optional<TokenId> stop_token;
};

void drain(RequestStream& stream, Collected& c) {
  while (std::optional<RequestOutput> out = stream.poll()) {
    for (const GeneratedToken& t : out->tokens) c.tokens.push_back(t.token);
    if (out->finished()) {
      c.finish = out->finish_reason;
      c.error = out->error_message;
      c.stop_token = out->stop_token;
    }
    c.num_cached_tokens = out->num_cached_tokens;
  }
}

std::map<std::string, Collected> run(Engine& engine, const std::vector<std::shared_ptr<RequestStream>>& streams,
                                     int max_steps = 10000) {
  std::map<std::string, Collected> out;
  for (int i = 0; i < max_steps && engine.has_work(); ++i) {
    engine.step();
    engine.check_invariants();
    for (const auto& s : streams) drain(*s, out[s->request_id()]);
  }
  EXPECT_FALSE(engine.has_work()) << "did not finish within " << max_steps << " steps";
  return out;
}

// The stall gauge is read between steps in production (the periodic log line,
// /metrics): it must grow while the engine is busy, not only at step ends.
TEST(Engine, DecodeStallGaugeGrowsUntilTheNextToken) {
  auto engine = make_engine(small_config());
  auto stream = engine->submit(request("a", tokens_from(10, 5), 50));
  ASSERT_TRUE(stream.ok()) << stream.error_message();
  EXPECT_EQ(engine->stats().longest_current_decode_stall_ms, 0.0);  // nothing decoding yet
  for (int i = 0; i < 20 && engine->stats().num_generated_tokens < 2; ++i) engine->step();
  ASSERT_GE(engine->stats().num_generated_tokens, 2);
  const double at_step_end = engine->stats().longest_current_decode_stall_ms;
  EXPECT_LT(at_step_end, 1.0);
  engine->advance_clock_to(engine->stats().now_ms + 750.0);
  EXPECT_NEAR(engine->stats().longest_current_decode_stall_ms, at_step_end + 750.0, 1e-6);
  engine->step();  // the next token ends the stall
  EXPECT_LT(engine->stats().longest_current_decode_stall_ms, 1.0);
}

class EngineInBothModes : public ::testing::TestWithParam<bool> {};  // param: async scheduling
INSTANTIATE_TEST_SUITE_P(Modes, EngineInBothModes, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Async") : std::string("Inline");
                         });

TEST_P(EngineInBothModes, GeneratesTheSingleSequenceResult) {
  auto engine = make_engine(small_config(GetParam()));
  const auto prompt = tokens_from(10, 5);
  auto stream = engine->submit(request("a", prompt, 7));
  ASSERT_TRUE(stream.ok()) << stream.error_message();
  auto out = run(*engine, {*stream});
  EXPECT_EQ(out["a"].tokens, reference_generate(prompt, 7));
  EXPECT_EQ(out["a"].finish, FinishReason::kLength);
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
  EXPECT_EQ(stats.num_requests_finished, 1);
  EXPECT_EQ(stats.num_generated_tokens, 7);

  const std::vector<RequestTimeline> timelines = engine->take_finished_timelines();
  ASSERT_EQ(timelines.size(), 1u);
  const RequestTimeline& t = timelines[0];
  EXPECT_EQ(t.token_ms.size(), 7u);
  ASSERT_TRUE(t.first_token_ms && t.finish_ms);
  EXPECT_EQ(*t.first_token_ms, t.token_ms.front());
  EXPECT_TRUE(std::is_sorted(t.token_ms.begin(), t.token_ms.end()));
  EXPECT_GT(*t.first_token_ms, t.arrival_ms);
}

TEST_P(EngineInBothModes, ChunkedPrefillEqualsUnchunkedAndFollowsTheTokenBudget) {
  EngineConfig config = small_config(GetParam());
  config.max_num_batched_tokens = 8;
  auto engine = make_engine(config);
  const auto prompt = tokens_from(30, 1);
  auto stream = engine->submit(request("a", prompt, 5));
  ASSERT_TRUE(stream.ok());
  auto out = run(*engine, {*stream});
  EXPECT_EQ(out["a"].tokens, reference_generate(prompt, 5));
  const auto timelines = engine->take_finished_timelines();
  ASSERT_EQ(timelines.size(), 1u);
  std::vector<std::int32_t> chunk_sizes;
  std::int32_t position = 0;
  for (const auto& c : timelines[0].prefill_chunks) {
    EXPECT_EQ(c.num_computed_tokens, position);
    position += c.num_tokens;
    chunk_sizes.push_back(c.num_tokens);
  }
  EXPECT_EQ(chunk_sizes, (std::vector<std::int32_t>{8, 8, 8, 6}));
}

TEST_P(EngineInBothModes, PrefixHitServesTheSharedPrefixAndStillMatchesTheOracle) {
  auto engine = make_engine(small_config(GetParam()));
  auto shared = tokens_from(21, 100);  // 5 full blocks + 1
  auto first = engine->submit(request("first", shared, 3));
  ASSERT_TRUE(first.ok());
  auto out1 = run(*engine, {*first});
  std::vector<TokenId> second_prompt = shared;
  second_prompt.push_back(7);
  second_prompt.push_back(8);
  auto second = engine->submit(request("second", second_prompt, 4));
  ASSERT_TRUE(second.ok());
  auto out2 = run(*engine, {*second});
  EXPECT_EQ(out1["first"].num_cached_tokens, 0);
  EXPECT_EQ(out2["second"].num_cached_tokens, 20);
  EXPECT_EQ(out2["second"].tokens, reference_generate(second_prompt, 4));
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.prefix_cache_hit_tokens, 20);
  EXPECT_EQ(stats.prefix_cache_queried_tokens, 21 + 23);
  EXPECT_EQ(stats.num_prompt_tokens_computed, 21 + 3);
}

TEST_P(EngineInBothModes, GeneratedTokensAreCachedForTheNextTurn) {
  auto engine = make_engine(small_config(GetParam()));
  const auto prompt = tokens_from(6, 50);
  auto turn1 = engine->submit(request("t1", prompt, 10));
  ASSERT_TRUE(turn1.ok());
  auto out1 = run(*engine, {*turn1});
  std::vector<TokenId> turn2_prompt = prompt;
  turn2_prompt.insert(turn2_prompt.end(), out1["t1"].tokens.begin(), out1["t1"].tokens.end());
  turn2_prompt.push_back(3);
  auto turn2 = engine->submit(request("t2", turn2_prompt, 2));
  ASSERT_TRUE(turn2.ok());
  auto out2 = run(*engine, {*turn2});
  // Turn 1 computed KV for prompt + 9 of its 10 outputs (the last was never fed back): 15 tokens, 3 full blocks.
  EXPECT_EQ(out2["t2"].num_cached_tokens, 12);
  EXPECT_EQ(out2["t2"].tokens, reference_generate(turn2_prompt, 2));
}

TEST_P(EngineInBothModes, StopTokenEosIgnoreEosAndMinTokens) {
  const auto prompt = tokens_from(5, 9);
  const std::vector<TokenId> free_run = reference_generate(prompt, 20);
  const TokenId third = free_run[2];
  {
    auto engine = make_engine(small_config(GetParam()));
    EngineRequest r = request("stop", prompt, 20);
    r.stop_token_ids = {third};
    auto s = engine->submit(r);
    auto out = run(*engine, {*s});
    EXPECT_EQ(out["stop"].tokens, std::vector<TokenId>(free_run.begin(), free_run.begin() + 3));
    EXPECT_EQ(out["stop"].finish, FinishReason::kStop);
    EXPECT_EQ(out["stop"].stop_token, third);
  }
  {
    auto engine = make_engine(small_config(GetParam()));
    EngineRequest r = request("eos", prompt, 20);
    r.eos_token_ids = {third};
    r.ignore_eos = true;
    auto s = engine->submit(r);
    auto out = run(*engine, {*s});
    EXPECT_EQ(out["eos"].tokens.size(), 20u);
    EXPECT_EQ(out["eos"].finish, FinishReason::kLength);
  }
  {
    auto engine = make_engine(small_config(GetParam()));
    EngineRequest r = request("min", prompt, 20);
    r.eos_token_ids = {free_run[0]};
    r.min_tokens = 2;  // the first token is EOS but too early to count
    auto s = engine->submit(r);
    auto out = run(*engine, {*s});
    const auto first_repeat = std::find(free_run.begin() + 1, free_run.end(), free_run[0]);
    const auto expected_len = first_repeat == free_run.end() ? 20 : (first_repeat - free_run.begin()) + 1;
    EXPECT_EQ(static_cast<std::ptrdiff_t>(out["min"].tokens.size()), expected_len);
  }
}

// A reader that polls between steps must learn that a token stopped the
// request in the same event that brings the token (the server leaves a stop
// token's text out of the answer only then).
TEST_P(EngineInBothModes, TheStopTokenArrivesWithTheEnd) {
  const auto prompt = tokens_from(5, 9);
  const std::vector<TokenId> free_run = reference_generate(prompt, 20);
  auto engine = make_engine(small_config(GetParam()));
  EngineRequest r = request("stop", prompt, 20);
  r.stop_token_ids = {free_run[2]};
  auto stream = engine->submit(r);
  ASSERT_TRUE(stream.ok());
  // Read at every push, as the server's callback does, so no two events coalesce.
  std::vector<RequestOutput> events;
  RequestStream& s = **stream;
  s.set_on_ready([&] {
    while (std::optional<RequestOutput> out = s.poll()) events.push_back(std::move(*out));
  });
  for (int i = 0; i < 50 && engine->has_work(); ++i) engine->step();
  ASSERT_FALSE(events.empty());
  const RequestOutput& last = events.back();
  ASSERT_TRUE(last.finished());
  ASSERT_EQ(last.tokens.size(), 1u);
  EXPECT_EQ(last.tokens[0].token, free_run[2]);
  EXPECT_EQ(last.stop_token, free_run[2]);
  for (std::size_t i = 0; i + 1 < events.size(); ++i) EXPECT_FALSE(events[i].finished());
}

// Each rejection path's code and field: request_validation_test.cpp; here,
// the refusals only the running engine can give, and that a request is
// refused whole rather than cut to fit.
TEST(Engine, RefusesWithACodeTheServerMaps) {
  EngineConfig config = small_config();
  config.max_num_queued_requests = 2;
  config.max_model_len_tokens = 100;
  auto engine = make_engine(config, 64);
  auto expect_error = [&](EngineRequest r, ErrorCode code, const std::string& needle) {
    auto result = engine->submit(std::move(r));
    ASSERT_FALSE(result.ok()) << needle;
    EXPECT_EQ(result.error().code, code) << result.error_message();
    EXPECT_NE(result.error_message().find(needle), std::string::npos) << result.error_message();
  };
  expect_error(request("", tokens_from(3, 0), 1), ErrorCode::kInvalidArgument, "request id");
  expect_error(request("x", {}, 1), ErrorCode::kInvalidArgument, "empty");
  expect_error(request("x", tokens_from(100, 0), 1), ErrorCode::kOutOfRange, "maximum context length is 100 tokens");
  expect_error(request("x", {1, 2, 5000}, 1), ErrorCode::kInvalidArgument, "vocabulary");
  expect_error(request("x", tokens_from(3, 0), 0), ErrorCode::kInvalidArgument, "max_tokens");
  // Rejected, not clamped: 3 + 98 > 100.
  expect_error(request("x", tokens_from(3, 0), 98), ErrorCode::kOutOfRange, "you requested 101 tokens");
  ASSERT_TRUE(engine->submit(request("a", tokens_from(3, 0), 97)).ok());
  expect_error(request("a", tokens_from(3, 0), 1), ErrorCode::kInvalidArgument, "already in use");
  ASSERT_TRUE(engine->submit(request("b", tokens_from(3, 0), 1)).ok());
  expect_error(request("c", tokens_from(3, 0), 1), ErrorCode::kResourceExhausted, "queue full");
  engine->stop(Engine::StopMode::kAbort);
  expect_error(request("d", tokens_from(3, 0), 1), ErrorCode::kUnavailable, "shutting down");
}

TEST(Engine, RefusesAQueueOfTooManyPromptTokens) {
  EngineConfig config = small_config();
  config.max_num_queued_tokens = 10;
  auto engine = make_engine(config);
  ASSERT_TRUE(engine->submit(request("a", tokens_from(6, 0), 1)).ok());
  auto result = engine->submit(request("b", tokens_from(5, 0), 1));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().code, ErrorCode::kResourceExhausted);
  EXPECT_TRUE(engine->submit(request("c", tokens_from(4, 0), 1)).ok());
}

// vLLM's default: without max_tokens a request may generate until the context is full.
TEST(Engine, AMissingMaxTokensRunsToTheEndOfTheContext) {
  EngineConfig config = small_config();
  config.max_model_len_tokens = 20;
  auto engine = make_engine(config);
  EngineRequest r = request("a", tokens_from(5, 0), 1);
  r.max_tokens.reset();
  auto stream = engine->submit(std::move(r));
  ASSERT_TRUE(stream.ok()) << stream.error_message();
  auto out = run(*engine, {*stream});
  EXPECT_EQ(out["a"].finish, FinishReason::kLength);
  EXPECT_EQ(out["a"].tokens, reference_generate(tokens_from(5, 0), 15));
}

TEST(Engine, RejectsAPromptTheKvCacheCannotHold) {
  auto engine = make_engine(small_config(), 8);  // 32 tokens of KV
  auto result = engine->submit(request("big", tokens_from(40, 0), 1));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().code, ErrorCode::kOutOfRange);
  EXPECT_NE(result.error_message().find("KV cache holds at most 32 tokens"), std::string::npos)
      << result.error_message();
}

TEST_P(EngineInBothModes, AbortWaitingAndRunningRequestsFreesEverything) {
  EngineConfig config = small_config(GetParam());
  config.max_num_seqs = 1;
  auto engine = make_engine(config);
  auto a = engine->submit(request("a", tokens_from(8, 0), 100));
  auto b = engine->submit(request("b", tokens_from(8, 50), 100));
  engine->step();
  engine->step();
  engine->abort("a");  // running
  engine->abort("b");  // waiting (max_num_seqs = 1)
  engine->abort("nobody");
  auto out = run(*engine, {*a, *b});
  EXPECT_EQ(out["a"].finish, FinishReason::kAbort);
  EXPECT_EQ(out["b"].finish, FinishReason::kAbort);
  EXPECT_TRUE(out["b"].tokens.empty());
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.num_requests_aborted, 2);
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
  // The id is free again.
  EXPECT_TRUE(engine->submit(request("a", tokens_from(8, 0), 1)).ok());
}

TEST_P(EngineInBothModes, ABackendFailureFailsOnlyThatRequest) {
  constexpr TokenId kPoison = 999;
  auto engine = make_engine(small_config(GetParam()), 256, kPoison);
  std::vector<TokenId> bad_prompt = tokens_from(6, 0);
  bad_prompt[3] = kPoison;
  const auto good_prompt = tokens_from(6, 20);
  auto bad = engine->submit(request("bad", bad_prompt, 5));
  auto good = engine->submit(request("good", good_prompt, 5));
  auto out = run(*engine, {*bad, *good});
  EXPECT_EQ(out["bad"].finish, FinishReason::kError);
  EXPECT_NE(out["bad"].error.find("poisoned"), std::string::npos);
  EXPECT_EQ(out["good"].finish, FinishReason::kLength);
  EXPECT_EQ(out["good"].tokens, reference_generate(good_prompt, 5));
  EXPECT_EQ(engine->stats().num_requests_failed, 1);
}

TEST_P(EngineInBothModes, PreemptionUnderMemoryPressureKeepsResultsExact) {
  EngineConfig config = small_config(GetParam());
  auto engine = make_engine(config, 12);  // 48 tokens of KV for 4 requests that grow to 30 each
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::vector<TokenId>> prompts;
  const std::vector<std::string> names = {"r0", "r1", "r2", "r3"};
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(tokens_from(10, 100 * i));
    auto s = engine->submit(request(names[static_cast<std::size_t>(i)], prompts.back(), 20));
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  auto out = run(*engine, streams);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[names[static_cast<std::size_t>(i)]].tokens, reference_generate(prompts[static_cast<std::size_t>(i)], 20));
  }
  EXPECT_GT(engine->stats().num_preemptions, 0);
  // Async scheduling settles the step in flight before a preemption; inline nothing is in flight.
  if (GetParam()) {
    EXPECT_GT(engine->stats().num_pipeline_waits, 0);
  } else {
    EXPECT_EQ(engine->stats().num_pipeline_waits, 0);
  }
}

// Found by the property test (block 4, 37 blocks, prefill-first, 4 seats, 34
// batched tokens, no host tier): a waiting request's prefix probe counted its
// hit blocks as in use (their owner was running), the owner finished without
// any eviction, and the probe, only ever extended, kept that count. Admission
// then thought the request needed 5 blocks fewer than it did, its commit
// failed, and a prefill-first plan (which leaves the decodes out when it has a
// prefill) ran nothing: the same empty step forever. Here "w" waits for a seat
// while "a" holds its prefix, "a" ends, and "w" does not fit beside "b".
TEST_P(EngineInBothModes, AStaleProbeAfterItsHitBlocksWereFreedDoesNotStallPrefillFirst) {
  EngineConfig config = small_config(GetParam());
  config.scheduling = SchedulingPolicy::kPrefillFirst;
  config.max_num_seqs = 2;
  config.max_num_batched_tokens = 256;
  auto engine = make_engine(config, 37);  // 148 tokens of KV
  const std::vector<TokenId> shared = tokens_from(20, 500);  // 5 blocks
  std::vector<TokenId> w_prompt = shared;
  for (TokenId t : tokens_from(30, 900)) w_prompt.push_back(t);  // 13 blocks in all
  const std::vector<TokenId> b_prompt = tokens_from(100, 0);      // 25 blocks, 35 at its end
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& r : {request("a", shared, 3), request("b", b_prompt, 40), request("w", w_prompt, 5)}) {
    auto s = engine->submit(r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    streams.push_back(*s);
  }
  auto out = run(*engine, streams, 500);
  EXPECT_EQ(out["a"].tokens, reference_generate(shared, 3));
  EXPECT_EQ(out["b"].tokens, reference_generate(b_prompt, 40));
  EXPECT_EQ(out["w"].tokens, reference_generate(w_prompt, 5));
  EXPECT_EQ(out["w"].finish, FinishReason::kLength);
}

// A context longer than the KV cache: a request without max_tokens used to
// grow past the cache, preempt itself and wait forever. It now ends at the
// cache's room with a length finish.
TEST_P(EngineInBothModes, ARequestNeverOutgrowsTheKvCache) {
  EngineConfig config = small_config(GetParam());
  config.max_model_len_tokens = 100;
  auto engine = make_engine(config, 8);  // 32 tokens of KV
  EngineRequest r = request("long", tokens_from(10, 0), 1);
  r.max_tokens.reset();
  auto s = engine->submit(std::move(r));
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto out = run(*engine, {*s});
  EXPECT_EQ(out["long"].finish, FinishReason::kLength);
  EXPECT_EQ(out["long"].tokens.size(), 22u);  // 32 tokens of room less the 10 of the prompt
}

TEST_P(EngineInBothModes, ThreadedModeServesConcurrentSubmitters) {
  EngineConfig config = small_config(GetParam());
  config.clock = ClockMode::kWall;
  Engine engine(std::make_unique<KvCheckingBackend>(512, kBlock, 4096), nullptr, config);
  engine.start();
  std::vector<std::thread> clients;
  std::vector<int> ok(4, 0);
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int k = 0; k < 5; ++k) {
        const auto prompt = tokens_from(5 + k, 10 * c + k);
        auto s = engine.submit(request(std::to_string(c) + "-" + std::to_string(k), prompt, 6));
        if (!s.ok()) return;
        Collected got;
        while (!got.finish) {
          if (auto out = (*s)->wait(std::chrono::milliseconds(2000))) {
            for (const auto& t : out->tokens) got.tokens.push_back(t.token);
            if (out->finished()) got.finish = out->finish_reason;
          } else {
            return;  // timed out: counted as a failure below
          }
        }
        if (got.tokens == reference_generate(prompt, 6)) ++ok[static_cast<std::size_t>(c)];
      }
    });
  }
  for (auto& t : clients) t.join();
  engine.stop(Engine::StopMode::kDrain);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(ok[static_cast<std::size_t>(c)], 5) << "client " << c;
  EXPECT_EQ(engine.stats().num_requests_finished, 20);
  EXPECT_FALSE(engine.submit(request("late", tokens_from(3, 0), 1)).ok());
}

TEST_P(EngineInBothModes, StopAbortEndsEveryStream) {
  EngineConfig config = small_config(GetParam());
  config.clock = ClockMode::kWall;
  Engine engine(std::make_unique<KvCheckingBackend>(512, kBlock, 4096), nullptr, config);
  auto s = engine.submit(request("x", tokens_from(5, 0), 1000));
  ASSERT_TRUE(s.ok());
  engine.start();
  engine.stop(Engine::StopMode::kAbort);
  Collected got;
  drain(**s, got);
  EXPECT_TRUE(got.finish.has_value());
}

// Sustained overload: two 64-token prompts arrive every step, one step serves
// one. Shortest-first keeps picking shorts; only the wait bound gets the long
// prompt its first token.
double long_prompt_ttft_under_overload(double max_prefill_wait_ms) {
  EngineConfig config = small_config();
  config.aging_ms = 50.0;
  config.max_prefill_wait_ms = max_prefill_wait_ms;
  auto engine = make_engine(config, 1024);
  auto long_stream = engine->submit(request("long", tokens_from(640, 0), 1));
  EXPECT_TRUE(long_stream.ok());
  std::vector<std::string> short_ids;
  for (int step = 0; step < 1500; ++step) {
    for (int k = 0; k < 2; ++k) {
      const std::string id = std::to_string(step * 2 + k);
      auto s = engine->submit(request(id, tokens_from(64, 1 + (step * 2 + k) % 500), 1));
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
    engine->step();
  }
  for (const RequestTimeline& t : engine->take_finished_timelines()) {
    if (t.request_id == "long") return *t.first_token_ms - t.arrival_ms;
  }
  return -1.0;  // no first token yet
}

TEST(Engine, TheWaitBoundEndsStarvationUnderOverload) {
  const double bounded = long_prompt_ttft_under_overload(500.0);
  EXPECT_GT(bounded, 500.0);
  EXPECT_LT(bounded, 600.0) << "served right after the bound, in ~10 steps of its own";
  EXPECT_EQ(long_prompt_ttft_under_overload(1e9), -1.0) << "without the bound, aging alone lets it starve";
}

// --decode-lane: every form parses back from its name, a malformed one names
// the flag, and validate refuses the lanes where they cannot run.
TEST(EngineConfigNames, DecodeLaneParsesAndIsRefusedWhereItCannotRun) {
  for (const auto& [lane, sms] : {std::pair{DecodeLane::kOff, 0}, std::pair{DecodeLane::kStream, 0},
                                  std::pair{DecodeLane::kHighPriority, 0}, std::pair{DecodeLane::kSms, 16}}) {
    auto parsed = parse_decode_lane(to_string(lane, sms));
    ASSERT_TRUE(parsed.ok()) << parsed.error_message();
    EXPECT_EQ(parsed->lane, lane);
    EXPECT_EQ(parsed->num_sms, sms);
  }
  for (const char* bad : {"sms:", "sms:0", "sms:x", "green", "sms:-4"}) {
    auto parsed = parse_decode_lane(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.error_message().find("--decode-lane"), std::string::npos) << parsed.error_message();
  }
  BackendInfo info{.block_size_tokens = 16, .num_kv_blocks = 10, .vocab_size = 10, .max_model_len_tokens = 100};
  EngineConfig lanes;
  lanes.decode_lane = DecodeLane::kHighPriority;
  EXPECT_TRUE(validate(lanes, info).ok());
  lanes.async_scheduling = true;
  EXPECT_NE(validate(lanes, info).error_message().find("--async-scheduling"), std::string::npos);
  lanes.async_scheduling = false;
  lanes.clock = ClockMode::kVirtual;  // the sim's lanes on the virtual clock (decode_lane_sim_test.cpp)
  EXPECT_TRUE(validate(lanes, info).ok()) << validate(lanes, info).error_message();
  EngineConfig no_sms;
  no_sms.decode_lane = DecodeLane::kSms;
  EXPECT_FALSE(validate(no_sms, info).ok());
  // The lane's context bound goes with a lane only, and is not negative.
  lanes.decode_lane_max_context = 64;
  EXPECT_TRUE(validate(lanes, info).ok()) << validate(lanes, info).error_message();
  lanes.decode_lane_max_context = -1;
  EXPECT_NE(validate(lanes, info).error_message().find("--decode-lane-max-context must be >= 0"), std::string::npos);
  EngineConfig bound_without_lane;
  bound_without_lane.decode_lane_max_context = 64;
  EXPECT_NE(validate(bound_without_lane, info).error_message().find("it needs --decode-lane"), std::string::npos);
  // So does its pace, within [0, 10 s].
  lanes.decode_lane_max_context = 0;
  lanes.decode_lane_interval_ms = 40.0;
  EXPECT_TRUE(validate(lanes, info).ok()) << validate(lanes, info).error_message();
  for (const double bad : {-1.0, 20000.0, std::nan("")}) {
    lanes.decode_lane_interval_ms = bad;
    EXPECT_NE(validate(lanes, info).error_message().find("--decode-lane-interval-ms must be in"), std::string::npos)
        << bad;
  }
  EngineConfig pace_without_lane;
  pace_without_lane.decode_lane_interval_ms = 40.0;
  EXPECT_NE(validate(pace_without_lane, info).error_message().find("it needs --decode-lane"), std::string::npos);
}

TEST(EngineConfigNames, ParseAndPrintRoundTrip) {
  for (auto p : {SchedulingPolicy::kSluice, SchedulingPolicy::kFcfs, SchedulingPolicy::kRoundRobin,
                 SchedulingPolicy::kPrefillFirst, SchedulingPolicy::kDecodeFirstTokenBudget}) {
    auto parsed = parse_scheduling_policy(to_string(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_NE(parse_scheduling_policy("vllm").error_message().find("decode-first-token-budget"), std::string::npos);
  EXPECT_EQ(parse_eviction_policy("slru").value(), EvictionPolicy::kSlru);
  for (auto e : {EvictionPolicy::kLru, EvictionPolicy::kSlru, EvictionPolicy::kPrefixAware, EvictionPolicy::kReuseHistory,
                 EvictionPolicy::kAdaptiveReuse}) {
    EXPECT_EQ(parse_eviction_policy(to_string(e)).value(), e);
  }
  EXPECT_FALSE(parse_eviction_policy("lfu").ok());
  BackendInfo info{.block_size_tokens = 16, .num_kv_blocks = 10, .vocab_size = 10, .max_model_len_tokens = 100};
  EngineConfig bad;
  bad.max_num_batched_tokens = 8;
  bad.max_num_seqs = 64;
  EXPECT_NE(validate(bad, info).error_message().find("--max-num-batched-tokens"), std::string::npos);
  EngineConfig too_long;
  too_long.max_model_len_tokens = 1000;
  EXPECT_FALSE(validate(too_long, info).ok());
  for (double share : {-0.1, 1.0}) {
    EngineConfig bad_share;
    bad_share.min_prefill_share = share;
    EXPECT_NE(validate(bad_share, info).error_message().find("--min-prefill-share"), std::string::npos) << share;
  }
  // The token-gap bound: 0 (3x the target) or at least the target.
  for (double gap : {-1.0, 49.0}) {
    EngineConfig bad_gap;
    bad_gap.max_token_gap_ms = gap;
    EXPECT_NE(validate(bad_gap, info).error_message().find("--max-token-gap-ms"), std::string::npos) << gap;
  }
  EngineConfig no_long_steps;
  no_long_steps.max_token_gap_ms = no_long_steps.max_step_ms;
  EXPECT_TRUE(validate(no_long_steps, info).ok());
  EXPECT_TRUE(validate(EngineConfig{}, info).ok());

  // The host tier: only on a backend that has one, at least one block, any order but prefix-aware.
  EngineConfig offload;
  offload.kv_offloading_bytes = 1 << 20;
  EXPECT_NE(validate(offload, info).error_message().find("has no host KV tier"), std::string::npos);
  BackendInfo with_host = info;
  with_host.kv_bytes_per_block = 4096;
  EXPECT_TRUE(validate(offload, with_host).ok());
  offload.kv_offloading_bytes = 100;
  EXPECT_NE(validate(offload, with_host).error_message().find("--kv-offloading-size gives 0 host blocks"),
            std::string::npos);
  offload.kv_offloading_bytes = 1 << 20;
  offload.kv_offloading_eviction = EvictionPolicy::kPrefixAware;
  EXPECT_NE(validate(offload, with_host).error_message().find("--kv-offloading-eviction"), std::string::npos);
  for (EvictionPolicy host : {EvictionPolicy::kLru, EvictionPolicy::kSlru, EvictionPolicy::kReuseHistory,
                              EvictionPolicy::kAdaptiveReuse}) {
    offload.kv_offloading_eviction = host;
    EXPECT_TRUE(validate(offload, with_host).ok());
  }
}

}  // namespace
}  // namespace sluice
