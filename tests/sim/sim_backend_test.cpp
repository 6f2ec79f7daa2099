// The sim backend: a virtual clock advanced by the cost model, deterministic
// fake tokens, KV capacity from the memory plan, malformed batches rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/sim_backend.h"

namespace sluice::sim {
namespace {

// A cost model the test can compute by hand: 1 ms + 0.5 ms per token.
class LinearCost final : public CostModel {
 public:
  double predict_step_ms(const StepShape& shape) const override { return 1.0 + 0.5 * shape.num_tokens(); }
};

// Owns the token and block storage a Batch's spans point to.
struct SeqFixture {
  std::vector<TokenId> tokens;
  std::vector<BlockId> blocks;
  SequenceStep step(SequenceId id, std::int32_t computed, std::int32_t new_tokens, bool sample) const {
    SequenceStep s;
    s.seq_id = id;
    s.tokens = tokens;
    s.num_prompt_tokens = static_cast<std::int32_t>(tokens.size());
    s.num_computed_tokens = computed;
    s.num_new_tokens = new_tokens;
    s.block_table = blocks;
    s.sample = sample;
    return s;
  }
};

SeqFixture fixture(std::int32_t num_tokens, std::int32_t block_size = 16) {
  SeqFixture f;
  f.tokens.resize(static_cast<std::size_t>(num_tokens));
  std::iota(f.tokens.begin(), f.tokens.end(), 0);
  f.blocks.resize(static_cast<std::size_t>((num_tokens + block_size - 1) / block_size));
  std::iota(f.blocks.begin(), f.blocks.end(), 0);
  return f;
}

BackendInfo info(std::int32_t max_len = 4096) {
  BackendInfo i;
  i.block_size_tokens = 16;
  i.num_kv_blocks = 1000;
  i.max_model_len_tokens = max_len;
  return i;
}

TEST(SimBackend, ClockAdvancesByThePredictedStepTime) {
  SimBackend sim(std::make_shared<LinearCost>(), info(), {.vocab_size = 1000});
  const SeqFixture a = fixture(100), b = fixture(40);
  Batch batch;
  batch.sequences = {a.step(1, 0, 100, true), b.step(2, 30, 10, true)};
  auto out = sim.execute(batch);
  ASSERT_TRUE(out.ok()) << out.error_message();
  EXPECT_DOUBLE_EQ(out->step_time_ms, 1.0 + 0.5 * 110);
  EXPECT_DOUBLE_EQ(sim.now_ms(), 56.0);
  ASSERT_TRUE(sim.execute(batch).ok());
  EXPECT_DOUBLE_EQ(sim.now_ms(), 112.0);
  EXPECT_EQ(sim.num_steps(), 2);
  EXPECT_EQ(sim.info().name, "sim");
}

TEST(SimBackend, TokensDependOnlyOnSequenceAndPosition) {
  SimBackend one(std::make_shared<LinearCost>(), info(), {.vocab_size = 50000});
  SimBackend two(std::make_shared<LinearCost>(), info(), {.vocab_size = 50000});
  const SeqFixture a = fixture(64), b = fixture(64);
  Batch alone;
  alone.sequences = {a.step(7, 0, 64, true)};
  Batch shared;
  shared.sequences = {b.step(9, 0, 64, true), a.step(7, 0, 64, true)};
  auto x = one.execute(alone);
  auto y = two.execute(shared);
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_TRUE(x->sequences[0].token.has_value());
  EXPECT_EQ(*x->sequences[0].token, *y->sequences[1].token);
  EXPECT_EQ(y->sequences[1].seq_id, 7u);
  // Different sequences and positions give (overwhelmingly) different tokens, all in range.
  std::vector<TokenId> seen;
  for (std::int32_t pos = 1; pos <= 64; ++pos) {
    const TokenId t = one.fake_token(7, pos, 0);
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 50000);
    seen.push_back(t);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_GT(std::unique(seen.begin(), seen.end()) - seen.begin(), 60);
}

TEST(SimBackend, NoSampleNoToken) {
  SimBackend sim(std::make_shared<LinearCost>(), info(), {.vocab_size = 100});
  const SeqFixture a = fixture(32);
  Batch batch;
  batch.sequences = {a.step(1, 0, 16, false)};
  auto out = sim.execute(batch);
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->sequences[0].token.has_value());
}

TEST(SimBackend, NeverEosUnlessAsked) {
  SimBackend never(std::make_shared<LinearCost>(), info(), {.vocab_size = 4, .eos_token_id = 2});
  for (std::int32_t pos = 0; pos < 2000; ++pos) EXPECT_NE(never.fake_token(3, pos, pos), 2);
  SimBackend every_third(std::make_shared<LinearCost>(), info(),
                         {.vocab_size = 4, .eos_token_id = 2, .emit_eos_every = 3});
  EXPECT_NE(every_third.fake_token(3, 10, 0), 2);
  EXPECT_NE(every_third.fake_token(3, 11, 1), 2);
  EXPECT_EQ(every_third.fake_token(3, 12, 2), 2);
}

TEST(SimBackend, RejectsMalformedBatches) {
  SimBackend sim(std::make_shared<LinearCost>(), info(/*max_len=*/64), {.vocab_size = 100});
  const SeqFixture long_seq = fixture(100);
  Batch past_max;
  past_max.sequences = {long_seq.step(1, 60, 10, true)};
  EXPECT_FALSE(sim.execute(past_max).ok());
  SeqFixture short_table = fixture(48);
  short_table.blocks.resize(2);  // covers 32 positions
  Batch missing_blocks;
  missing_blocks.sequences = {short_table.step(2, 30, 10, true)};
  auto out = sim.execute(missing_blocks);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error_message().find("block table"), std::string::npos) << out.error_message();
  Batch past_tokens;
  past_tokens.sequences = {short_table.step(3, 40, 20, true)};
  EXPECT_FALSE(sim.execute(past_tokens).ok());
  EXPECT_EQ(sim.now_ms(), 0);  // a rejected step takes no time
}

TEST(MakeSimBackend, KvBlocksFromTheMemoryPlan) {
  const ModelProfile ds = *find_profile("deepseek-v4.1-flash");
  const Parallelism par{.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8};
  SimBackendOptions options;
  options.max_model_len_tokens = 1048576;
  auto backend = make_sim_backend(ds, h200(), par, options);
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  MemoryOptions memory = options.memory;
  memory.max_model_len_tokens = 1048576;
  EXPECT_EQ((*backend)->info().num_kv_blocks, plan_memory(ds, h200(), par, memory).num_kv_blocks);
  EXPECT_EQ((*backend)->info().vocab_size, 129280);
  EXPECT_EQ((*backend)->info().max_model_len_tokens, 1048576);
  // Its clock runs on the roofline model.
  const RooflineCostModel model(ds, h200(), par);
  const SeqFixture a = fixture(4096);
  Batch batch;
  batch.sequences = {a.step(1, 0, 4096, true)};
  auto out = (*backend)->execute(batch);
  ASSERT_TRUE(out.ok());
  EXPECT_DOUBLE_EQ(out->step_time_ms, model.predict_step_ms({.sequences = {{4096, 0}}}));

  options.num_kv_blocks_override = 1234;
  auto small = make_sim_backend(ds, h200(), par, options);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->info().num_kv_blocks, 1234);
}

TEST(MakeSimBackend, FailsWhenItDoesNotFitOrIsInvalid) {
  const ModelProfile ds = *find_profile("deepseek-v4.1-flash");
  EXPECT_FALSE(make_sim_backend(ds, h200(), {}, {}).ok());
  const ModelProfile llama = *find_profile("llama-3-8b");
  EXPECT_FALSE(make_sim_backend(llama, h200(), {.num_gpus = 2, .tensor_parallel = 2, .expert_parallel = 2}, {}).ok());
  EXPECT_FALSE(make_sim_backend(llama, h200(), {}, {.max_model_len_tokens = 1 << 20}).ok());
}

TEST(MakeSimBackend, IdenticalRunsAreIdentical) {
  const ModelProfile llama = *find_profile("llama-3-8b");
  auto a = make_sim_backend(llama, h200(), {}, {});
  auto b = make_sim_backend(llama, h200(), {}, {});
  ASSERT_TRUE(a.ok() && b.ok());
  const SeqFixture s1 = fixture(3000), s2 = fixture(200);
  for (std::int32_t step = 0; step < 20; ++step) {
    Batch batch;
    batch.sequences = {s1.step(11, step * 100, 100, true), s2.step(12, step * 10, 1, true)};
    auto x = (*a)->execute(batch);
    auto y = (*b)->execute(batch);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->step_time_ms, y->step_time_ms);
    EXPECT_EQ(*x->sequences[0].token, *y->sequences[0].token);
    EXPECT_EQ(*x->sequences[1].token, *y->sequences[1].token);
  }
  EXPECT_EQ((*a)->now_ms(), (*b)->now_ms());
}

}  // namespace
}  // namespace sluice::sim

namespace sluice::sim {
namespace {

// Copies on the sim: 1 MB blocks over a 1 GB/s link take 1 ms each, queue
// behind each other per direction, overlap compute, and a batch without
// sequences waits for the rest of a batch in flight.
TEST(SimBackendCopies, QueuePerDirectionOverlapComputeAndWait) {
  BackendInfo i;
  i.block_size_tokens = 16;
  i.num_kv_blocks = 64;
  i.max_model_len_tokens = 4096;
  i.kv_bytes_per_block = 1'000'000;
  i.host_link_bytes_per_s = 1e9;
  SimBackend sim(std::make_shared<LinearCost>(), i, {});
  ASSERT_TRUE(sim.allocate_host_kv_cache(8).ok());

  // Three loads and one store start with a 2.5 ms step (3 tokens): loads end
  // at 1, 2, 3 ms, the store (the other direction) at 1 ms.
  std::vector<TokenId> tokens = {1, 2, 3};
  std::vector<BlockId> table = {0};
  Batch step;
  step.sequences.push_back({.seq_id = 7, .tokens = tokens, .num_prompt_tokens = 3, .num_new_tokens = 3,
                            .block_table = table});
  for (KvCopyId id = 1; id <= 3; ++id)
    step.copies.push_back({.id = id, .direction = KvCopyDirection::kHostToDevice, .device_block = 1, .host_block = 0});
  step.copies.push_back({.id = 4, .direction = KvCopyDirection::kDeviceToHost, .device_block = 2, .host_block = 1});
  Result<StepOutput> out = sim.execute(step);
  ASSERT_TRUE(out.ok()) << out.error_message();
  EXPECT_DOUBLE_EQ(out->step_time_ms, 2.5) << "copies do not slow the step";
  std::vector<KvCopyId> done;
  for (const KvCopyCompletion& c : out->completed_copies) done.push_back(c.id);
  std::sort(done.begin(), done.end());
  EXPECT_EQ(done, (std::vector<KvCopyId>{1, 2, 4}));

  // The same id again (a retry) is not a new copy; the wait ends when load 3 lands.
  Result<StepOutput> waited = sim.execute(Batch{.copies = {step.copies[2]}});
  ASSERT_TRUE(waited.ok());
  EXPECT_DOUBLE_EQ(waited->step_time_ms, 0.5);
  ASSERT_EQ(waited->completed_copies.size(), 1u);
  EXPECT_EQ(waited->completed_copies[0].id, 3u);
  EXPECT_DOUBLE_EQ(sim.now_ms(), 3.0);
  EXPECT_EQ(sim.num_copies_in_flight(), 0);
  Result<StepOutput> idle = sim.execute(Batch{});
  ASSERT_TRUE(idle.ok());
  EXPECT_DOUBLE_EQ(idle->step_time_ms, 0.0) << "nothing in flight: no wait";
}

// A batch without sequences waits until a whole batch of copies has landed,
// the first to land in full, as the CUDA backend waits for its oldest batch's
// event: a load of many blocks is one wait, not one per block (issue 17,
// S20-5: a wait per block gave the engine a round per block, and the paced
// sim's loads under the decode lane ran at 28% of the link).
TEST(SimBackendCopies, AWaitLandsAWholeBatch) {
  BackendInfo i;
  i.block_size_tokens = 16;
  i.num_kv_blocks = 64;
  i.max_model_len_tokens = 4096;
  i.kv_bytes_per_block = 1'000'000;
  i.host_link_bytes_per_s = 1e9;  // 1 ms a copy
  SimBackend sim(std::make_shared<LinearCost>(), i, {});
  ASSERT_TRUE(sim.allocate_host_kv_cache(16).ok());
  auto ids_of = [](const StepOutput& out) {
    std::vector<KvCopyId> ids;
    for (const KvCopyCompletion& c : out.completed_copies) ids.push_back(c.id);
    std::sort(ids.begin(), ids.end());
    return ids;
  };

  // Eight loads and nothing to compute: one wait of 8 ms lands all of them.
  Batch load;
  for (KvCopyId id = 1; id <= 8; ++id)
    load.copies.push_back({.id = id, .direction = KvCopyDirection::kHostToDevice,
                           .device_block = static_cast<BlockId>(id), .host_block = static_cast<BlockId>(id)});
  Result<StepOutput> waited = sim.execute(load);
  ASSERT_TRUE(waited.ok()) << waited.error_message();
  EXPECT_DOUBLE_EQ(waited->step_time_ms, 8.0);
  EXPECT_EQ(ids_of(*waited), (std::vector<KvCopyId>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(sim.num_copies_in_flight(), 0);

  // Four stores start with a 2.5 ms step (ends 9, 10, 11, 12 ms; two land in
  // it); then a load of one block (ends 11.5 ms) and nothing to compute: the
  // load's batch lands in full first, so the wait ends there with store 11.
  std::vector<TokenId> tokens = {1, 2, 3};
  std::vector<BlockId> table = {0};
  Batch step;
  step.sequences.push_back({.seq_id = 7, .tokens = tokens, .num_prompt_tokens = 3, .num_new_tokens = 3,
                            .block_table = table});
  for (KvCopyId id = 11; id <= 14; ++id)
    step.copies.push_back({.id = id, .direction = KvCopyDirection::kDeviceToHost,
                           .device_block = static_cast<BlockId>(id), .host_block = static_cast<BlockId>(id)});
  Result<StepOutput> computed = sim.execute(step);
  ASSERT_TRUE(computed.ok()) << computed.error_message();
  EXPECT_EQ(ids_of(*computed), (std::vector<KvCopyId>{11, 12}));
  Result<StepOutput> first = sim.execute(Batch{.copies = {{.id = 21, .direction = KvCopyDirection::kHostToDevice,
                                                           .device_block = 21, .host_block = 1}}});
  ASSERT_TRUE(first.ok()) << first.error_message();
  EXPECT_DOUBLE_EQ(sim.now_ms(), 11.5);
  EXPECT_EQ(ids_of(*first), (std::vector<KvCopyId>{13, 21}));
  Result<StepOutput> second = sim.execute(Batch{});
  ASSERT_TRUE(second.ok()) << second.error_message();
  EXPECT_DOUBLE_EQ(sim.now_ms(), 12.0);
  EXPECT_EQ(ids_of(*second), (std::vector<KvCopyId>{14}));
}

TEST(SimBackendCopies, MadeBackendsStateBlockBytesAndLinkRate) {
  const ModelProfile profile = *find_profile("llama-3-8b");
  auto backend = make_sim_backend(profile, h200(), Parallelism{}, {.num_kv_blocks_override = 100});
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  // Llama-3-8B: 32 layers x 8 kv heads x 128 x 2 (K, V) x 2 bytes = 128 KiB per token.
  EXPECT_EQ((*backend)->info().kv_bytes_per_block, 16 * 131072);
  EXPECT_DOUBLE_EQ((*backend)->info().host_link_bytes_per_s, 55e9 * 0.9);
}

}  // namespace
}  // namespace sluice::sim

namespace sluice::sim {
namespace {

// --decode-lane sms:N on the sim: the lane's steps priced on N of the H200's
// 132 SMs (compute by 132/N, memory by the 0.0206 share per SM of
// S17-lead-1), the backend's own on the other 132 - N, its compute more
// again by the lane's HBM traffic (hardware.h): 1.08x beside 16 SMs back to
// back, as the burst's chunks were fit (S16).
TEST(SimBackendLanes, AnSmLaneIsPricedOnItsShareAndTheBackendOnTheRest) {
  const ModelProfile llama = *find_profile("llama-3-8b");
  auto backend = make_sim_backend(llama, h200_sluice_cuda(), {}, {});
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  const StepShape decode{.sequences = std::vector<StepShape::Sequence>(8, {.num_new_tokens = 1, .num_computed_tokens = 1000})};
  const StepShape chunk{.sequences = {{.num_new_tokens = 8192, .num_computed_tokens = 65536}}};
  const auto whole_decode = (*backend)->cost_model().predict_terms(decode).values();
  const auto whole_chunk = (*backend)->cost_model().predict_terms(chunk).values();

  auto lane = (*backend)->make_sm_lane({.num_sms = 16});
  ASSERT_TRUE(lane.ok()) << lane.error_message();
  const auto lane_decode = (*lane)->cost_model().predict_terms(decode).values();
  const auto rest_chunk = (*backend)->cost_model().predict_terms(chunk).values();
  const double compute = 132.0 / 16, memory = 1.0 / (16 * 0.0206);
  const std::array<double, CostTerms::kNumTerms> lane_factors = {compute, memory, compute, memory, 1.0};
  const double rest_compute = rest_chunk[0] / whole_chunk[0];
  EXPECT_NEAR(rest_compute / (132.0 / 116), 1.08, 0.005);
  const std::array<double, CostTerms::kNumTerms> rest_factors = {rest_compute, 1.0, rest_compute, 1.0, 1.0};
  for (std::size_t i = 0; i < CostTerms::kNumTerms; ++i) {
    EXPECT_NEAR(lane_decode[i], whole_decode[i] * lane_factors[i], 1e-9 * (1 + whole_decode[i])) << "term " << i;
    EXPECT_NEAR(rest_chunk[i], whole_chunk[i] * rest_factors[i], 1e-9 * (1 + whole_chunk[i])) << "term " << i;
  }
  // The decode step is memory-bound: about 3x slower on 16 SMs, not 8x.
  const double slowdown =
      (*lane)->cost_model().predict_step_ms(decode) / std::accumulate(whole_decode.begin(), whole_decode.end(), 0.0);
  EXPECT_GT(slowdown, 2.0);
  EXPECT_LT(slowdown, 4.0);
  // The lane runs steps on its own clock and copies nothing.
  const SeqFixture s = fixture(1001);
  Batch batch;
  batch.sequences = {s.step(1, 1000, 1, true)};
  auto ran = (*lane)->execute(batch);
  ASSERT_TRUE(ran.ok()) << ran.error_message();
  EXPECT_TRUE(ran->sequences[0].token.has_value());
  EXPECT_GT((*lane)->now_ms(), 0.0);
  EXPECT_EQ((*backend)->now_ms(), 0.0);
  EXPECT_EQ((*lane)->info().kv_bytes_per_block, 0);
}

// The H200's driver makes SM groups of 8: a lane of 12 runs on 16
// (S16-lead-2), priced so, and the rest on 116.
TEST(SimBackendLanes, AnSmGroupIsRoundedUpToTheDriversGranularity) {
  const ModelProfile llama = *find_profile("llama-3-8b");
  const StepShape decode{.sequences = std::vector<StepShape::Sequence>(8, {.num_new_tokens = 1, .num_computed_tokens = 1000})};
  const StepShape chunk{.sequences = {{.num_new_tokens = 8192, .num_computed_tokens = 65536}}};
  auto priced = [&](std::int32_t sms) {
    auto backend = make_sim_backend(llama, h200_sluice_cuda(), {}, {});
    EXPECT_TRUE(backend.ok()) << backend.error_message();
    auto lane = (*backend)->make_sm_lane({.num_sms = sms});
    EXPECT_TRUE(lane.ok()) << lane.error_message();
    return std::pair{(*lane)->cost_model().predict_step_ms(decode), (*backend)->cost_model().predict_step_ms(chunk)};
  };
  EXPECT_EQ(priced(12), priced(16));
  EXPECT_EQ(priced(9), priced(16));
  EXPECT_NE(priced(8), priced(16));
  auto backend = make_sim_backend(llama, h200_sluice_cuda(), {}, {});
  ASSERT_TRUE(backend.ok());
  auto too_many = (*backend)->make_sm_lane({.num_sms = 130});
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error_message().find("an SM partition of 136"), std::string::npos) << too_many.error_message();
}

// A paced lane reads the weights less often, so the chunk beside it slows
// less (S16-lead-4: 10% beside 16 SMs back to back, 3% paced at 50 ms); a
// pace shorter than the lane's own step changes nothing.
TEST(SimBackendLanes, APacedLaneSlowsThePrefillLessThanOneBackToBack) {
  const ModelProfile llama = *find_profile("llama-3-8b");
  const StepShape chunk{.sequences = {{.num_new_tokens = 8192, .num_computed_tokens = 65536}}};
  auto chunk_beside = [&](double pace_ms) {
    auto backend = make_sim_backend(llama, h200_sluice_cuda(), {}, {});
    EXPECT_TRUE(backend.ok()) << backend.error_message();
    EXPECT_TRUE((*backend)->make_sm_lane({.num_sms = 16, .step_interval_ms = pace_ms}).ok());
    return (*backend)->cost_model().predict_step_ms(chunk);
  };
  auto backend = make_sim_backend(llama, h200_sluice_cuda(), {}, {});
  ASSERT_TRUE(backend.ok());
  const double alone = (*backend)->cost_model().predict_step_ms(chunk);
  const double back_to_back = chunk_beside(0.0), paced = chunk_beside(40.0), slower = chunk_beside(80.0);
  EXPECT_EQ(chunk_beside(5.0), back_to_back) << "a pace under the lane's ~16 ms step";
  EXPECT_GT(back_to_back, paced);
  EXPECT_GT(paced, slower);
  EXPECT_GT(slower, alone * 132.0 / 116 * 0.99) << "the SMs' share stays";
}

TEST(SimBackendLanes, LanesThatShareEverySmOrCannotSplitAreRefused) {
  const ModelProfile llama = *find_profile("llama-3-8b");
  auto backend = make_sim_backend(llama, h200_sluice_cuda(), {}, {});
  ASSERT_TRUE(backend.ok());
  auto shared = (*backend)->make_lane({.high_priority = true});
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.error_message().find("sms:N"), std::string::npos) << shared.error_message();
  auto all = (*backend)->make_lane({.num_sms = 132});
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.error_message().find("132 SMs"), std::string::npos) << all.error_message();
  ASSERT_TRUE((*backend)->make_lane({.num_sms = 16}).ok());
  EXPECT_FALSE((*backend)->make_lane({.num_sms = 16}).ok()) << "split once";
  auto two_gpus = make_sim_backend(llama, h200_sluice_cuda(), {.num_gpus = 2, .tensor_parallel = 2}, {});
  ASSERT_TRUE(two_gpus.ok()) << two_gpus.error_message();
  EXPECT_FALSE((*two_gpus)->make_lane({.num_sms = 16}).ok());
}

}  // namespace
}  // namespace sluice::sim
