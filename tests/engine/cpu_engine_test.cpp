// The engine on the real CPU backend (a tiny random-weight Llama): generation
// through the engine, with other requests sharing its batches, with prefix-
// cache hits and with chunked prefill, equals single-sequence generation
// (generate_sequence, no engine) token for token; inline and with async
// scheduling (the backend on the pipeline's worker thread, each decode's
// input token from the request's token log, penalties over that history).
// A prefix loaded back from the host KV tier gives the same tokens and
// log-probabilities as computing it cold.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>

#include "../model/test_models.h"
#include "../support/throwing_ops.h"
#include "engine_test_support.h"
#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/common/rng.h"
#include "sluice/engine/decode_lane_warmup.h"
#include "sluice/engine/engine.h"
#include "sluice/engine/prefill_warmup.h"
#include "sluice/model/generate.h"
#include "sluice/model/make_model.h"
#include "sluice/model/model_runner.h"

namespace sluice {
namespace {

using testing::Generated;
using testing::run_one_after_another;

constexpr std::int32_t kVocab = 512;
constexpr std::int32_t kNewTokens = 12;

std::string tiny_model_dir() {
  static const std::string dir = [] {
    const std::string d = std::string(SLUICE_BINARY_DIR) + "/test-scratch/engine-cpu-model";
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    MakeModelOptions o;
    o.num_layers = 2;
    o.hidden_size = 64;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.intermediate_size = 128;
    o.vocab_size = kVocab;
    o.seed = 11;
    o.max_position_embeddings = 512;
    o.out_dir = d;
    const Status s = make_model(o);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return d;
  }();
  return dir;
}

// A tiny DeepSeek-V3 (tests/model's qlora_yarn shape: 8 experts in 4 groups, a shared expert, a dense layer).
std::string tiny_deepseek_v3_dir() {
  static const std::string dir = testing::make_deepseek_v3_model("qlora_yarn", "engine-cpu-deepseek-v3");
  return dir;
}

// The model served and how it is split: tensor_parallel_size > 1 runs that
// many ranks, one thread each; expert_parallel splits MoE experts whole.
struct Served {
  std::string model_dir;  // empty: tiny_model_dir()
  std::int32_t tensor_parallel_size = 1;
  bool expert_parallel = false;
};

std::unique_ptr<Backend> cpu_backend(std::int32_t block_size_tokens, std::int32_t num_kv_blocks,
                                     const Served& served = {}) {
  std::vector<std::unique_ptr<Ops>> rank_ops;
  for (std::int32_t r = 0; r < served.tensor_parallel_size; ++r)
    rank_ops.push_back(make_cpu_ops({.num_threads = served.tensor_parallel_size == 1 ? 2 : 1}));
  auto backend = make_tensor_parallel_model_runner(
      served.model_dir.empty() ? tiny_model_dir() : served.model_dir, std::move(rank_ops),
      {.block_size_tokens = block_size_tokens,
       .num_kv_blocks = num_kv_blocks,
       .enable_expert_parallel = served.expert_parallel});
  EXPECT_TRUE(backend.ok()) << backend.error_message();
  return std::move(backend).value();
}

struct Case {
  std::string id;
  std::vector<TokenId> prompt;
  SamplingParams sampling;
};

// Prompts that share a 24-token prefix (6 blocks of 4), plus a sampled one.
std::vector<Case> cases() {
  SplitMix64 rng(5);
  auto random_tokens = [&](int n) {
    std::vector<TokenId> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<TokenId>(rng.next() % kVocab));
    return t;
  };
  const std::vector<TokenId> shared = random_tokens(24);
  std::vector<Case> out;
  for (int i = 0; i < 4; ++i) {
    Case c{.id = "greedy" + std::to_string(i), .prompt = shared};
    const auto tail = random_tokens(3 + 5 * i);
    c.prompt.insert(c.prompt.end(), tail.begin(), tail.end());
    out.push_back(std::move(c));
  }
  Case sampled{.id = "sampled", .prompt = shared};
  sampled.prompt.push_back(7);
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_k = 40;
  sampled.sampling.seed = 1234;
  out.push_back(std::move(sampled));
  Case penalized{.id = "penalized", .prompt = shared};
  penalized.prompt.push_back(9);
  penalized.sampling.repetition_penalty = 1.5f;
  penalized.sampling.frequency_penalty = 0.5f;
  out.push_back(std::move(penalized));
  return out;
}

std::map<std::string, std::vector<TokenId>> through_engine(bool prefix_caching, std::int32_t max_num_batched_tokens,
                                                          bool async_scheduling = false,
                                                          const Served& served = {},
                                                          DecodeLane decode_lane = DecodeLane::kOff,
                                                          bool warm_the_lane = false) {
  EngineConfig config;
  config.async_scheduling = async_scheduling;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = max_num_batched_tokens;
  config.enable_prefix_caching = prefix_caching;
  // Two lanes run at once on the wall clock only.
  config.clock = decode_lane == DecodeLane::kOff ? ClockMode::kVirtual : ClockMode::kWall;
  config.decode_lane = decode_lane;
  config.kv_reserve_fraction = 0.0;
  std::unique_ptr<Backend> backend = cpu_backend(4, 256, served);
  auto lane = make_decode_lane(*backend, config);
  EXPECT_TRUE(lane.ok()) << lane.error_message();
  if (warm_the_lane) {
    // As serve warms: the largest prefill chunk on the main lane first, at
    // the model's limit of 512 tokens (the cache holds 1,024).
    auto prefill = warm_largest_prefill(*backend, max_num_batched_tokens);
    EXPECT_TRUE(prefill.ok()) << prefill.error_message();
    const std::int32_t chunk = std::min(max_num_batched_tokens, 512);
    EXPECT_EQ(prefill->shape.num_computed_tokens, 512 - chunk);
    EXPECT_EQ(prefill->shape.num_new_tokens, chunk);
    EXPECT_FALSE(prefill->free_bytes_after.has_value()) << "the CPU backend has no device memory to report";
    // Contexts 128, 256 and 512 (the model's limit) over 1,024 tokens of cache.
    EXPECT_EQ(backend->info().max_model_len_tokens, 512);
    auto warmed = warm_decode_lane(**lane, backend->info(), config.max_num_seqs, 512);
    EXPECT_TRUE(warmed.ok()) << warmed.error_message();
    EXPECT_EQ(warmed->contexts, (std::vector<std::int32_t>{128, 256, 512}));
    // 1-8 sequences at 128 (8 steps), 1-4 at 256 (4), one at 256 beside 1-6 at
    // 128 (6), 1-2 at 512 (2), one at 512 beside 1-4 at 128 (4).
    EXPECT_EQ(warmed->num_steps, 24);
  }
  Engine engine(std::move(backend), nullptr, config, std::move(lane).value());
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  std::map<std::string, std::vector<TokenId>> out;
  // The first request alone, so that the others can hit its cached prefix.
  const std::vector<Case> all = cases();
  for (std::size_t i = 0; i < all.size(); ++i) {
    EngineRequest r{.request_id = all[i].id, .prompt_token_ids = all[i].prompt, .sampling = all[i].sampling,
                    .max_tokens = kNewTokens};
    auto s = engine.submit(std::move(r));
    EXPECT_TRUE(s.ok()) << s.error_message();
    streams[all[i].id] = *s;
    if (i == 0) {
      while (engine.has_work()) engine.step();
    }
  }
  for (int step = 0; step < 1000 && engine.has_work(); ++step) {
    engine.step();
    engine.check_invariants();
  }
  for (auto& [id, s] : streams) {
    while (auto o = s->poll()) {
      for (const GeneratedToken& t : o->tokens) out[id].push_back(t.token);
      EXPECT_TRUE(!o->finished() || o->finish_reason == FinishReason::kLength) << id << ": " << o->error_message;
    }
  }
  const EngineStats stats = engine.stats();
  if (prefix_caching) {
    EXPECT_GE(stats.prefix_cache_hit_tokens, 4 * 24) << "the later requests should hit the shared prefix";
  } else {
    EXPECT_EQ(stats.prefix_cache_hit_tokens, 0);
  }
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
  if (decode_lane != DecodeLane::kOff) {
    // Once no prompt is left to prefill, the main lane runs the decodes (the
    // last steps of every run). With chunked prompts (one or two requests'
    // worth a step) the first to finish its prompt decodes on the decode
    // lane, beside the chunks of the others. Whole prompts all prefill in one step.
    EXPECT_GT(stats.num_main_lane_decode_steps, 0);
    if (max_num_batched_tokens < 32) {
      EXPECT_GT(stats.num_decode_lane_steps, 0);
      EXPECT_GT(stats.num_steps_beside_other_lane, 0);
    }
  } else {
    EXPECT_EQ(stats.num_decode_lane_steps, 0);
    EXPECT_EQ(stats.num_main_lane_decode_steps, 0);
  }
  return out;
}

std::map<std::string, std::vector<TokenId>> single_sequence(const std::string& model_dir = "") {
  std::map<std::string, std::vector<TokenId>> out;
  for (const Case& c : cases()) {
    auto backend = cpu_backend(4, 256, {.model_dir = model_dir});
    auto result = generate_sequence(*backend, c.prompt, {.max_new_tokens = kNewTokens, .sampling = c.sampling});
    EXPECT_TRUE(result.ok()) << result.error_message();
    out[c.id] = result->tokens;
  }
  return out;
}

TEST(EngineOnCpu, EqualsSingleSequenceGeneration) {
  const auto reference = single_sequence();
  ASSERT_EQ(reference.size(), 6u);
  // The oracle is not degenerate: different prompts give different continuations.
  EXPECT_NE(reference.at("greedy0"), reference.at("greedy1"));
  EXPECT_NE(reference.at("greedy0"), reference.at("sampled"));
  EXPECT_EQ(through_engine(/*prefix_caching=*/false, /*max_num_batched_tokens=*/4096), reference)
      << "batched, no prefix hits, whole prompts";
  EXPECT_EQ(through_engine(/*prefix_caching=*/true, /*max_num_batched_tokens=*/4096), reference)
      << "batched, with prefix hits";
  EXPECT_EQ(through_engine(/*prefix_caching=*/true, /*max_num_batched_tokens=*/10), reference)
      << "batched, prefix hits and chunked prefill";
  EXPECT_EQ(through_engine(/*prefix_caching=*/true, /*max_num_batched_tokens=*/4096, /*async_scheduling=*/true),
            reference)
      << "async scheduling, with prefix hits";
  EXPECT_EQ(through_engine(/*prefix_caching=*/true, /*max_num_batched_tokens=*/10, /*async_scheduling=*/true),
            reference)
      << "async scheduling, prefix hits and chunked prefill";
}

// Two step loops (--decode-lane): the decodes on a lane of their own (a
// second CpuOps over the same KV pages and weights, its own thread), beside
// the prefill chunks on the first. Each request is in one lane at a time, so
// the tokens are the single-sequence ones, chunked or whole, with prefix hits.
TEST(EngineOnCpu, DecodeLaneEqualsSingleSequenceGeneration) {
  const auto reference = single_sequence();
  EXPECT_EQ(through_engine(/*prefix_caching=*/true, /*max_num_batched_tokens=*/10, /*async_scheduling=*/false, {},
                           DecodeLane::kStream),
            reference)
      << "decode lane, prefix hits and chunked prefill";
  EXPECT_EQ(through_engine(/*prefix_caching=*/true, /*max_num_batched_tokens=*/4096, /*async_scheduling=*/false, {},
                           DecodeLane::kHighPriority),
            reference)
      << "decode lane, with prefix hits";
}

// The warm-ups before serving (the largest prefill chunk, the decode lane's
// steps) write KV into free blocks: what they leave there is overwritten
// before any request reads it.
TEST(EngineOnCpu, AWarmedDecodeLaneEqualsSingleSequenceGeneration) {
  const auto reference = single_sequence();
  EXPECT_EQ(through_engine(/*prefix_caching=*/true, /*max_num_batched_tokens=*/10, /*async_scheduling=*/false, {},
                           DecodeLane::kStream, /*warm_the_lane=*/true),
            reference);
}

TEST(DecodeLaneWarmup, CoversEveryBatchSizeToSixteenThenHalfOctaves) {
  std::vector<std::int32_t> to_sixteen;
  for (std::int32_t n = 1; n <= 16; ++n) to_sixteen.push_back(n);
  auto with = [&](std::vector<std::int32_t> more) {
    std::vector<std::int32_t> all = to_sixteen;
    all.insert(all.end(), more.begin(), more.end());
    return all;
  };
  EXPECT_EQ(warmup_batch_sizes(64), with({24, 32, 48, 64}));
  EXPECT_EQ(warmup_batch_sizes(20), with({20}));
  EXPECT_EQ(warmup_batch_sizes(256), with({24, 32, 48, 64, 96, 128, 192, 256}));
  EXPECT_EQ(warmup_batch_sizes(3), (std::vector<std::int32_t>{1, 2, 3}));
}

// The prefill warm-up's chunk: --max-num-batched-tokens (or the whole model
// length) ending at the deepest position, the model's or the cache's.
TEST(PrefillWarmup, TheLargestChunkEndsAtTheDeepestPosition) {
  const BackendInfo info{.block_size_tokens = 16, .num_kv_blocks = 64, .max_model_len_tokens = 512};
  auto shape = [&](const BackendInfo& i, std::int32_t batched) {
    const PrefillWarmupShape s = largest_prefill_chunk(i, batched);
    return std::pair(s.num_computed_tokens, s.num_new_tokens);
  };
  EXPECT_EQ(shape(info, 100), std::pair(412, 100));
  EXPECT_EQ(shape(info, 8192), std::pair(0, 512));
  BackendInfo small_cache = info;
  small_cache.num_kv_blocks = 20;  // 320 tokens
  EXPECT_EQ(shape(small_cache, 100), std::pair(220, 100));
  small_cache.num_kv_blocks = 0;
  EXPECT_EQ(shape(small_cache, 100), std::pair(0, 0));
}

// A prompt of `length` tokens that no case shares a prefix with.
std::vector<TokenId> patterned_prompt(std::size_t length) {
  std::vector<TokenId> prompt(length);
  for (std::size_t i = 0; i < length; ++i) prompt[i] = static_cast<TokenId>((i * 37) % kVocab);
  return prompt;
}

// Two lanes (a stream of their own), prompts in chunks of 8 tokens, 256 KV
// blocks of 4 tokens.
std::unique_ptr<Engine> engine_with_a_lane_and_small_chunks(std::int32_t decode_lane_max_context = 0,
                                                            double decode_lane_interval_ms = 0.0) {
  EngineConfig config;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 8;
  config.kv_reserve_fraction = 0.0;
  config.decode_lane = DecodeLane::kStream;
  config.decode_lane_max_context = decode_lane_max_context;
  config.decode_lane_interval_ms = decode_lane_interval_ms;
  std::unique_ptr<Backend> backend = cpu_backend(4, 256);
  auto lane = make_decode_lane(*backend, config);
  EXPECT_TRUE(lane.ok()) << lane.error_message();
  return std::make_unique<Engine>(std::move(backend), nullptr, config, std::move(lane).value());
}

// Aborting a request while the lanes run: a short prompt decodes alone (on
// the main lane: nothing to prefill), then a long prompt prefills in chunks on
// the main lane while the short one decodes on the decode lane; the long one is
// aborted between steps (its chunk most likely still in flight: its blocks
// wait for that step's collection). The short one still gets the
// single-sequence tokens, every step keeps the invariants, and every block
// comes back.
TEST(EngineOnCpu, DecodeLaneAbortMidPrefillLosesNothing) {
  const std::unique_ptr<Engine> made = engine_with_a_lane_and_small_chunks();
  Engine& engine = *made;
  const Case short_case = cases().front();
  auto short_stream = engine.submit(EngineRequest{.request_id = "short", .prompt_token_ids = short_case.prompt,
                                                  .sampling = short_case.sampling, .max_tokens = kNewTokens});
  ASSERT_TRUE(short_stream.ok()) << short_stream.error_message();
  for (int step = 0; step < 100 && engine.stats().num_generated_tokens == 0; ++step) engine.step();
  // Alone, with nothing to prefill, the short one decodes on the main lane.
  engine.step();
  engine.step();
  EXPECT_EQ(engine.stats().num_decode_lane_steps, 0);
  EXPECT_EQ(engine.stats().num_main_lane_decode_steps, 2);
  const std::vector<TokenId> long_prompt = patterned_prompt(300);
  auto long_stream =
      engine.submit(EngineRequest{.request_id = "long", .prompt_token_ids = long_prompt, .max_tokens = 4});
  ASSERT_TRUE(long_stream.ok()) << long_stream.error_message();
  for (int step = 0; step < 6; ++step) {
    engine.step();
    engine.check_invariants();
  }
  engine.abort("long");
  for (int step = 0; step < 1000 && engine.has_work(); ++step) {
    engine.step();
    engine.check_invariants();
  }
  std::vector<TokenId> tokens;
  while (auto o = (*short_stream)->poll())
    for (const GeneratedToken& t : o->tokens) tokens.push_back(t.token);
  EXPECT_EQ(tokens, single_sequence().at(short_case.id));
  std::optional<FinishReason> long_end;
  while (auto o = (*long_stream)->poll())
    if (o->finished()) long_end = o->finish_reason;
  EXPECT_EQ(long_end, FinishReason::kAbort);
  const EngineStats stats = engine.stats();
  EXPECT_GT(stats.num_steps_beside_other_lane, 0) << "the long prompt's chunks ran beside the short one's decodes";
  EXPECT_GT(stats.num_decode_lane_steps, 0) << "the short one decoded on its lane while the long one prefilled";
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
}

// A decode over a context longer than the lane's bound runs in the prefill
// lane's steps, beside its chunks: the short request (27 tokens, over a bound
// of 20) keeps decoding while the long prompt prefills, never on the decode
// lane, with the single-sequence tokens.
TEST(EngineOnCpu, ADecodeLongerThanTheLaneBoundRidesThePrefillLanesChunks) {
  const std::unique_ptr<Engine> made = engine_with_a_lane_and_small_chunks(/*decode_lane_max_context=*/20);
  Engine& engine = *made;
  const Case short_case = cases().front();
  ASSERT_GT(short_case.prompt.size(), 20u);
  auto short_stream = engine.submit(EngineRequest{.request_id = "short", .prompt_token_ids = short_case.prompt,
                                                  .sampling = short_case.sampling, .max_tokens = kNewTokens});
  ASSERT_TRUE(short_stream.ok()) << short_stream.error_message();
  std::vector<TokenId> tokens;
  auto drain_short = [&] {
    while (auto o = (*short_stream)->poll())
      for (const GeneratedToken& t : o->tokens) tokens.push_back(t.token);
  };
  for (int step = 0; step < 100 && tokens.empty(); ++step) {
    engine.step();
    drain_short();
  }
  const std::vector<TokenId> long_prompt = patterned_prompt(300);
  auto long_stream =
      engine.submit(EngineRequest{.request_id = "long", .prompt_token_ids = long_prompt, .max_tokens = 4});
  ASSERT_TRUE(long_stream.ok()) << long_stream.error_message();
  const std::size_t before_long = tokens.size();
  bool long_started = false;
  std::size_t during_long_prefill = 0;
  for (int step = 0; step < 1000 && engine.has_work(); ++step) {
    engine.step();
    engine.check_invariants();
    drain_short();
    while (auto o = (*long_stream)->poll()) long_started = long_started || !o->tokens.empty();
    if (!long_started) during_long_prefill = tokens.size() - before_long;
  }
  EXPECT_EQ(tokens, single_sequence().at(short_case.id));
  EXPECT_GE(during_long_prefill, 5u) << "the short one decodes beside the long prompt's 38 chunks";
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.num_decode_lane_steps, 0) << "no decode was within the bound";
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
}

// A paced decode lane (--decode-lane-interval-ms) on the wall clock: while a
// long prompt prefills in chunks, the short request's tokens come no faster
// than one per interval (the engine waits for a chunk or the lane's turn,
// whichever comes first), and they are still the single-sequence tokens.
TEST(EngineOnCpu, APacedDecodeLaneWaitsForItsTurnOnTheWallClock) {
  constexpr double kIntervalMs = 5.0;
  const std::unique_ptr<Engine> made = engine_with_a_lane_and_small_chunks(0, kIntervalMs);
  Engine& engine = *made;
  const Case short_case = cases().front();
  auto short_stream = engine.submit(EngineRequest{.request_id = "short", .prompt_token_ids = short_case.prompt,
                                                  .sampling = short_case.sampling, .max_tokens = kNewTokens});
  ASSERT_TRUE(short_stream.ok()) << short_stream.error_message();
  std::vector<TokenId> tokens;
  std::vector<std::chrono::steady_clock::time_point> arrivals;
  auto drain_short = [&] {
    while (auto o = (*short_stream)->poll())
      for (const GeneratedToken& t : o->tokens) {
        tokens.push_back(t.token);
        arrivals.push_back(std::chrono::steady_clock::now());
      }
  };
  for (int step = 0; step < 100 && tokens.empty(); ++step) {
    engine.step();
    drain_short();
  }
  const std::vector<TokenId> long_prompt = patterned_prompt(480);  // 60 chunks
  auto long_stream =
      engine.submit(EngineRequest{.request_id = "long", .prompt_token_ids = long_prompt, .max_tokens = 1});
  ASSERT_TRUE(long_stream.ok()) << long_stream.error_message();
  const std::size_t first = tokens.size();
  bool long_started = false;
  std::size_t last_during_prefill = first;
  for (int step = 0; step < 100000 && engine.has_work(); ++step) {
    engine.step();
    engine.check_invariants();
    drain_short();
    while (auto o = (*long_stream)->poll()) long_started = long_started || !o->tokens.empty();
    if (!long_started) last_during_prefill = tokens.size();
  }
  EXPECT_EQ(tokens, single_sequence().at(short_case.id));
  ASSERT_GE(last_during_prefill, first + 3) << "the short one decoded on its lane during the long prefill";
  // The lane's steps began an interval apart, so n tokens span (n - 1)
  // intervals. A token is seen when the test polls, after the step that
  // collected it (a chunk may come first): the first and the last sighting
  // may each be late by a chunk's time, a millisecond or two here.
  using Ms = std::chrono::duration<double, std::milli>;
  const double span_ms = Ms(arrivals[last_during_prefill - 1] - arrivals[first]).count();
  EXPECT_GE(span_ms, static_cast<double>(last_during_prefill - 1 - first) * kIntervalMs - 4.0)
      << last_during_prefill - first << " tokens while the long prompt prefilled";
  EXPECT_GT(engine.stats().num_decode_lane_steps, 0);
}

// A lane of a tensor-parallel group, or one confined to SMs on the CPU, is
// refused, with the flag named.
TEST(EngineOnCpu, DecodeLaneRefusedWhereItCannotRun) {
  {
    std::unique_ptr<Backend> backend = cpu_backend(4, 64);
    EngineConfig config;
    config.decode_lane = DecodeLane::kSms;
    config.decode_lane_sms = 8;
    auto lane = make_decode_lane(*backend, config);
    ASSERT_FALSE(lane.ok());
    EXPECT_NE(lane.error_message().find("--decode-lane sms:8: a lane confined to SMs needs the cuda device"),
              std::string::npos)
        << lane.error_message();
  }
  std::unique_ptr<Backend> backend = cpu_backend(4, 64, {.tensor_parallel_size = 2});
  EngineConfig config;
  config.decode_lane = DecodeLane::kStream;
  auto lane = make_decode_lane(*backend, config);
  ASSERT_FALSE(lane.ok());
  EXPECT_NE(lane.error_message().find("--decode-lane stream"), std::string::npos) << lane.error_message();
  EXPECT_NE(lane.error_message().find("tensor parallelism"), std::string::npos) << lane.error_message();
}

// The model split over 2 ranks (one thread each, rank 0 sampling) behind the
// same engine gives the unsharded single-sequence tokens, the seeded sampled
// request included: sampling stays a function of (logits, seed, index), and
// the sharded logits differ from the unsharded ones by ~1e-6 only.
TEST(EngineOnCpu, TensorParallelEqualsSingleSequenceGeneration) {
  const auto reference = single_sequence();
  EXPECT_EQ(through_engine(/*prefix_caching=*/true, /*max_num_batched_tokens=*/10, /*async_scheduling=*/false,
                           {.tensor_parallel_size = 2}),
            reference)
      << "TP 2, prefix hits and chunked prefill";
  EXPECT_EQ(through_engine(/*prefix_caching=*/true, /*max_num_batched_tokens=*/4096, /*async_scheduling=*/true,
                           {.tensor_parallel_size = 2}),
            reference)
      << "TP 2, async scheduling, with prefix hits";
}

// DeepSeek-V3 with its 8 routed experts split whole over 2 ranks (4 each)
// behind the engine: the unsharded single-sequence tokens, batched, with
// prefix hits, chunked prefill and seeded sampling.
TEST(EngineOnCpu, ExpertParallelDeepseekV3EqualsSingleSequenceGeneration) {
  const auto reference = single_sequence(tiny_deepseek_v3_dir());
  ASSERT_EQ(reference.size(), 6u);
  EXPECT_NE(reference.at("greedy0"), reference.at("greedy1"));
  EXPECT_EQ(through_engine(/*prefix_caching=*/true, /*max_num_batched_tokens=*/10, /*async_scheduling=*/false,
                           {.model_dir = tiny_deepseek_v3_dir(), .tensor_parallel_size = 2, .expert_parallel = true}),
            reference)
      << "EP 2, prefix hits and chunked prefill";
}

// A rank that throws mid-step kills the engine: the request in that step
// fails naming the rank, the requests waiting behind it fail with "the
// engine is dead" and the same reason (none is left waiting on a backend that
// will not run it), and submit refuses from then on with kUnavailable.
TEST(EngineOnCpu, ARankFailureFailsEveryRequestAndRefusesNewOnes) {
  std::atomic<bool> armed{false};
  std::vector<std::unique_ptr<Ops>> rank_ops;
  rank_ops.push_back(make_cpu_ops({.num_threads = 1}));
  rank_ops.push_back(std::make_unique<testing::ThrowingOps>(armed));
  auto backend = make_tensor_parallel_model_runner(tiny_model_dir(), std::move(rank_ops),
                                                   {.block_size_tokens = 4, .num_kv_blocks = 64});
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  EngineConfig config;
  config.max_num_seqs = 1;  // one runs, the others wait
  config.clock = ClockMode::kVirtual;
  config.kv_reserve_fraction = 0.0;
  Engine engine(std::move(backend).value(), nullptr, config);
  auto submit = [&](const std::string& id) {
    return engine.submit(EngineRequest{.request_id = id, .prompt_token_ids = {1, 2, 3, 4, 5}, .max_tokens = 4});
  };
  auto first = submit("first");
  ASSERT_TRUE(first.ok()) << first.error_message();
  engine.step();  // its prefill runs while the rank is healthy
  EXPECT_FALSE(engine.fatal_error().has_value());
  std::vector<std::shared_ptr<RequestStream>> waiting;
  for (const char* id : {"second", "third"}) {
    auto s = submit(id);
    ASSERT_TRUE(s.ok()) << s.error_message();
    waiting.push_back(*s);
  }
  armed = true;
  for (int step = 0; step < 10 && engine.has_work(); ++step) engine.step();
  EXPECT_FALSE(engine.has_work()) << "nothing may be left waiting on a dead backend";

  const std::string failure = "communicator group aborted by rank 1: injected matmul failure";
  ASSERT_TRUE(engine.fatal_error().has_value());
  EXPECT_EQ(*engine.fatal_error(), "the tensor-parallel group is down: " + failure);
  auto ending = [](RequestStream& stream) {
    RequestOutput last;
    while (auto o = stream.poll()) last = std::move(*o);
    return last;
  };
  const RequestOutput failed = ending(**first);
  EXPECT_EQ(failed.finish_reason, FinishReason::kError);
  EXPECT_NE(failed.error_message.find(failure), std::string::npos) << failed.error_message;
  for (auto& stream : waiting) {
    const RequestOutput out = ending(*stream);
    EXPECT_EQ(out.finish_reason, FinishReason::kError) << stream->request_id();
    EXPECT_EQ(out.error_message, "the engine is dead: the tensor-parallel group is down: " + failure);
  }
  EXPECT_EQ(engine.stats().num_requests_failed, 3);
  EXPECT_EQ(engine.stats().num_free_kv_blocks, engine.stats().num_kv_blocks);

  armed = false;  // a healed rank does not bring the group back
  auto refused = submit("fourth");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(refused.error_message(), "the engine is dead: the tensor-parallel group is down: " + failure);
}

TEST(EngineOnCpu, HostTierHitEqualsColdRun) {
  SplitMix64 rng(9);
  auto random_tokens = [&](int n) {
    std::vector<TokenId> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<TokenId>(rng.next() % kVocab));
    return t;
  };
  const std::vector<TokenId> shared = random_tokens(24);  // 6 blocks of 4
  std::vector<TokenId> first = shared, last = shared;
  for (TokenId t : random_tokens(5)) first.push_back(t);
  for (TokenId t : random_tokens(7)) last.push_back(t);
  // Fillers push the shared prefix off the 32-block device pool, into the host tier.
  const std::vector<std::vector<TokenId>> prompts = {first, random_tokens(60), random_tokens(60), random_tokens(60),
                                                     last};

  EngineConfig config;
  config.max_num_seqs = 2;
  config.max_num_batched_tokens = 16;
  config.clock = ClockMode::kVirtual;
  config.kv_reserve_fraction = 0.0;
  std::unique_ptr<Backend> backend = cpu_backend(4, 32);
  ASSERT_GT(backend->info().kv_bytes_per_block, 0) << "the CPU reference offers a host tier";
  config.kv_offloading_bytes = 64 * backend->info().kv_bytes_per_block;
  Engine tiered(std::move(backend), nullptr, config);
  const Generated warm = run_one_after_another(tiered, prompts, kNewTokens, /*num_top_logprobs=*/5);
  const EngineStats stats = tiered.stats();
  ASSERT_GE(stats.host_cache_hit_tokens, 20) << "the last prompt's shared prefix came back from the host tier";
  EXPECT_GT(stats.host_loaded_blocks, 0);
  EXPECT_GT(stats.host_stored_blocks, 0);
  EXPECT_EQ(stats.host_loaded_bytes, stats.host_loaded_blocks * tiered.backend_info().kv_bytes_per_block);
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);

  EngineConfig cold_config = config;
  cold_config.kv_offloading_bytes = 0;
  cold_config.enable_prefix_caching = false;
  Engine cold(cpu_backend(4, 32), nullptr, cold_config);
  const Generated reference = run_one_after_another(cold, {last}, kNewTokens, /*num_top_logprobs=*/5);
  ASSERT_EQ(reference.tokens.size(), static_cast<std::size_t>(kNewTokens));
  EXPECT_EQ(warm, reference);
}

}  // namespace
}  // namespace sluice
