// Step planner tests: each builds a SchedState by hand and checks the plan
// against what the policy's definition says, computed independently here.
#include "sluice/sched/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace sluice {
namespace {

constexpr std::int32_t kBlock = 16;

// Time = 1 ms fixed + 0.01 ms per new token + 1e-6 ms per (new token x context):
// simple enough to solve by hand in the assertions.
class LinearCost final : public CostModel {
 public:
  double predict_step_ms(const StepShape& shape) const override {
    double ms = 1.0;
    for (const auto& s : shape.sequences) {
      ms += 0.01 * s.num_new_tokens + 1e-6 * s.num_new_tokens * (s.num_computed_tokens + s.num_new_tokens);
    }
    return ms;
  }
};

SchedRequest decoding(SequenceId id, std::int32_t len, double arrival_ms = 0) {
  return {.seq_id = id, .num_tokens = len + 1, .num_computed_tokens = len,
          .num_allocated_blocks = (len + kBlock) / kBlock, .arrival_ms = arrival_ms};
}
SchedRequest waiting(SequenceId id, std::int32_t prompt, double arrival_ms = 0) {
  return {.seq_id = id, .num_tokens = prompt, .arrival_ms = arrival_ms};
}

struct Fixture {
  std::vector<SchedRequest> running;
  std::vector<SchedRequest> queue;
  std::int32_t available_blocks = 100000;
  std::int32_t freeing_blocks = 0;
  std::int32_t num_finishing_seqs = 0;
  double now_ms = 0;
  std::uint64_t step = 0;
  SchedState state() const {
    return {.running = running, .waiting = queue, .num_finishing_seqs = num_finishing_seqs,
            .num_available_blocks = available_blocks, .num_freeing_blocks = freeing_blocks,
            .num_total_blocks = 100000, .block_size_tokens = kBlock, .now_ms = now_ms, .step_index = step};
  }
};

std::vector<SequenceId> ids(const std::vector<ScheduledChunk>& chunks) {
  std::vector<SequenceId> out;
  for (const auto& c : chunks) out.push_back(c.seq_id);
  return out;
}

// The waiting requests the plan starts this step.
std::vector<SequenceId> admitted(const StepPlan& plan) {
  std::vector<SequenceId> out;
  for (const auto& c : plan.prefills)
    if (c.admits) out.push_back(c.seq_id);
  return out;
}

TEST(Planner, DecodesFirstThenPrefillUnderTheTimeCap) {
  Fixture f;
  f.running = {decoding(1, 100), decoding(2, 200)};
  f.queue = {waiting(3, 100000)};
  const SchedConfig config{.max_num_batched_tokens = 100000, .max_step_ms = 20.0};
  const LinearCost cost;
  const StepPlan plan = plan_step(f.state(), config, cost);
  EXPECT_EQ(ids(plan.decodes), (std::vector<SequenceId>{1, 2}));
  ASSERT_EQ(plan.prefills.size(), 1u);
  EXPECT_EQ(admitted(plan), (std::vector<SequenceId>{3}));
  // Solve 1 + 2*(0.01 + 1e-6*(101|201)) + 0.01 k + 1e-6 k^2 <= 20 for k, then round down to a block.
  const double decode_ms = 1.0 + 0.01 + 1e-6 * 101 + 0.01 + 1e-6 * 201;
  const double k = (-0.01 + std::sqrt(0.0001 + 4e-6 * (20.0 - decode_ms))) / 2e-6;
  const std::int32_t expected = static_cast<std::int32_t>(k) / kBlock * kBlock;
  EXPECT_EQ(plan.prefills[0].num_new_tokens, expected);
  EXPECT_LE(plan.predicted_step_ms, 20.0);
  EXPECT_GT(cost.predict_step_ms({.sequences = {{1, 100}, {1, 200}, {expected + kBlock, 0}}}), 20.0);
}

TEST(Planner, ChunkDeepInAPromptIsSmallerThanAtItsStart) {
  const LinearCost cost;
  const SchedConfig config{.max_num_batched_tokens = 100000, .max_step_ms = 50.0};
  Fixture early, late;
  early.running = {{.seq_id = 1, .num_tokens = 300000, .num_computed_tokens = 0, .num_allocated_blocks = 0}};
  late.running = {{.seq_id = 1, .num_tokens = 300000, .num_computed_tokens = 250000,
                   .num_allocated_blocks = 250000 / kBlock}};
  const std::int32_t at_0 = plan_step(early.state(), config, cost).prefills.at(0).num_new_tokens;
  const std::int32_t at_250k = plan_step(late.state(), config, cost).prefills.at(0).num_new_tokens;
  EXPECT_GT(at_0, 2 * at_250k) << at_0 << " vs " << at_250k;
  EXPECT_LE(cost.predict_step_ms({.sequences = {{at_250k, 250000}}}), 50.0);
}

TEST(Planner, TokenBudgetAndPerRequestThresholdCap) {
  Fixture f;
  f.queue = {waiting(1, 5000), waiting(2, 5000)};
  const LinearCost cost;
  const StepPlan plan = plan_step(
      f.state(), {.max_num_batched_tokens = 3000, .long_prefill_token_threshold = 1024, .max_step_ms = 1e9}, cost);
  ASSERT_EQ(plan.prefills.size(), 2u);
  EXPECT_EQ(plan.prefills[0].num_new_tokens, 1024);
  EXPECT_EQ(plan.prefills[1].num_new_tokens, 1024);
  const StepPlan budget_only = plan_step(f.state(), {.max_num_batched_tokens = 3000, .max_step_ms = 1e9}, cost);
  ASSERT_EQ(budget_only.prefills.size(), 1u);
  EXPECT_EQ(budget_only.prefills[0].num_new_tokens, 3000);
}

TEST(Planner, ShortestRemainingPrefillFirst) {
  Fixture f;
  f.queue = {waiting(1, 90000, 0), waiting(2, 500, 10), waiting(3, 4000, 20)};
  const StepPlan plan = plan_step(f.state(), {.max_num_batched_tokens = 100000, .max_step_ms = 1e9}, LinearCost{});
  EXPECT_EQ(ids(plan.prefills), (std::vector<SequenceId>{2, 3, 1}));
  // Remaining, not total: a prompt mostly served from cache is short (10
  // tokens at 89990: 1 + 0.1 + 0.9 ms, against 1 + 5 + 0.25 for the 500).
  f.queue[0].num_cached_tokens = 89990;
  const StepPlan cached = plan_step(f.state(), {.max_num_batched_tokens = 100000, .max_step_ms = 1e9}, LinearCost{});
  EXPECT_EQ(cached.prefills.at(0).seq_id, 1u);
}

TEST(Planner, AgingLetsALongWaitBeatAShortArrival) {
  // Remaining time (LinearCost): 20000 tokens 1 + 200 + 400 = 601 ms, 9000
  // tokens 1 + 90 + 81 = 172 ms. After 10 aging periods the long one competes
  // as 601 / 11 = 54.6 < 172; after 1, as 300.5 > 172.
  Fixture f;
  f.now_ms = 300000;
  f.queue = {waiting(1, 20000, 0), waiting(2, 9000, f.now_ms)};
  const SchedConfig config{.max_num_batched_tokens = 1000, .max_step_ms = 1e9, .aging_ms = 30000};
  EXPECT_EQ(plan_step(f.state(), config, LinearCost{}).prefills.at(0).seq_id, 1u);
  EXPECT_DOUBLE_EQ(aged_remaining_ms(601.0, 300000, 30000), 601.0 / 11.0);
  f.now_ms = 30000;
  f.queue[1].arrival_ms = f.now_ms;
  EXPECT_EQ(plan_step(f.state(), config, LinearCost{}).prefills.at(0).seq_id, 2u);
}

TEST(Planner, ShortestRemainingOrdersByTimeNotTokens) {
  // A prompt with 20000 tokens left at position 98000 (1 + 200 + 2360 ms)
  // against a fresh 30000-token one (1 + 300 + 900 ms): fewer tokens, more
  // time. The fresh one goes first; by tokens it would wait.
  Fixture f;
  SchedRequest deep = waiting(1, 118000, 0);
  deep.num_computed_tokens = 98000;
  deep.num_allocated_blocks = 98000 / kBlock;
  f.running = {deep};
  f.queue = {waiting(2, 30000, 0)};
  const SchedConfig config{.max_num_batched_tokens = 1000, .max_step_ms = 1e9};
  EXPECT_EQ(ids(plan_step(f.state(), config, LinearCost{}).prefills), (std::vector<SequenceId>{2}));
  // With only 10000 tokens left there (1 + 100 + 1080 ms) it is shorter again.
  f.running[0].num_tokens = 108000;
  EXPECT_EQ(ids(plan_step(f.state(), config, LinearCost{}).prefills), (std::vector<SequenceId>{1}));
}

TEST(Planner, PastTheMaxWaitArrivalOrderComesFirst) {
  Fixture f;
  f.now_ms = 10000;
  // Under overload everybody has aged: the long prompt's aged key (90000/1.33)
  // still loses to the shorts', but it has waited past the bound.
  f.queue = {waiting(1, 90000, 0), waiting(2, 300, 2000), waiting(3, 100, 9000), waiting(4, 200, 1000)};
  SchedConfig config{.max_num_batched_tokens = 200000, .max_step_ms = 1e9, .aging_ms = 30000,
                     .max_prefill_wait_ms = 7000};
  EXPECT_EQ(ids(plan_step(f.state(), config, LinearCost{}).prefills), (std::vector<SequenceId>{1, 4, 2, 3}))
      << "1, 4 and 2 waited >= 7 s: first, by arrival; then 3";
  config.max_prefill_wait_ms = 1e9;
  EXPECT_EQ(ids(plan_step(f.state(), config, LinearCost{}).prefills), (std::vector<SequenceId>{3, 4, 2, 1}));
}

TEST(Planner, FcfsKeepsArrivalOrder) {
  Fixture f;
  f.queue = {waiting(1, 90000, 0), waiting(2, 500, 10)};
  const StepPlan plan = plan_step(
      f.state(), {.policy = SchedulingPolicy::kFcfs, .max_num_batched_tokens = 100000, .max_step_ms = 1e9}, LinearCost{});
  EXPECT_EQ(ids(plan.prefills), (std::vector<SequenceId>{1, 2}));
}

TEST(Planner, PrefillFirstStarvesDecodesWhilePrefillsPend) {
  Fixture f;
  f.running = {decoding(1, 100), decoding(2, 100)};
  f.queue = {waiting(3, 100000)};
  const SchedConfig config{.policy = SchedulingPolicy::kPrefillFirst, .max_num_batched_tokens = 8192, .max_step_ms = 1};
  const StepPlan plan = plan_step(f.state(), config, LinearCost{});
  EXPECT_TRUE(plan.decodes.empty());
  ASSERT_EQ(plan.prefills.size(), 1u);
  EXPECT_EQ(plan.prefills[0].num_new_tokens, 8192) << "the token budget, not time, bounds it";
  f.queue.clear();
  EXPECT_EQ(ids(plan_step(f.state(), config, LinearCost{}).decodes), (std::vector<SequenceId>{1, 2}));
}

TEST(Planner, DecodeFirstTokenBudgetIgnoresTimeAndPerRequestCap) {
  Fixture f;
  f.running = {decoding(1, 100)};
  f.queue = {waiting(2, 100000, 0), waiting(3, 50, 1)};
  const SchedConfig config{.policy = SchedulingPolicy::kDecodeFirstTokenBudget, .max_num_batched_tokens = 8192,
                           .long_prefill_token_threshold = 512, .max_step_ms = 1};
  const StepPlan plan = plan_step(f.state(), config, LinearCost{});
  EXPECT_EQ(ids(plan.decodes), (std::vector<SequenceId>{1}));
  ASSERT_EQ(plan.prefills.size(), 1u);
  EXPECT_EQ(plan.prefills[0].seq_id, 2u);
  EXPECT_EQ(plan.prefills[0].num_new_tokens, 8191);
  EXPECT_GT(plan.predicted_step_ms, 1.0);
}

TEST(Planner, RoundRobinSharesAndRotates) {
  Fixture f;
  f.queue = {waiting(1, 10000, 0), waiting(2, 10000, 1), waiting(3, 10000, 2)};
  const SchedConfig config{.policy = SchedulingPolicy::kRoundRobin, .max_num_batched_tokens = 3000, .max_step_ms = 1e9};
  const StepPlan first = plan_step(f.state(), config, LinearCost{});
  EXPECT_EQ(ids(first.prefills), (std::vector<SequenceId>{1, 2, 3}));
  for (const auto& c : first.prefills) EXPECT_EQ(c.num_new_tokens, 1000);
  f.step = 1;
  EXPECT_EQ(ids(plan_step(f.state(), config, LinearCost{}).prefills), (std::vector<SequenceId>{2, 3, 1}));
}

TEST(Planner, AdmissionKeepsTheReserveAndRoomForAdmittedPrompts) {
  Fixture f;
  // A running prefill still needs 50 blocks for the rest of its prompt.
  f.running = {{.seq_id = 1, .num_tokens = 100 * kBlock, .num_computed_tokens = 50 * kBlock,
                .num_allocated_blocks = 50}};
  f.queue = {waiting(2, 40 * kBlock)};
  f.available_blocks = 100;
  const SchedConfig config{.max_num_batched_tokens = 100, .max_step_ms = 1e9, .reserve_blocks = 10};
  // 100 available - 50 promised - 40 needed = 10 >= reserve: admitted.
  EXPECT_EQ(admitted(plan_step(f.state(), config, LinearCost{})), (std::vector<SequenceId>{2}));
  f.available_blocks = 99;
  const StepPlan plan = plan_step(f.state(), config, LinearCost{});
  EXPECT_TRUE(admitted(plan).empty());
  EXPECT_EQ(ids(plan.prefills), (std::vector<SequenceId>{1}));
}

TEST(Planner, MaxNumSeqsCapsAdmission) {
  Fixture f;
  f.running = {decoding(1, 10), decoding(2, 10)};
  f.queue = {waiting(3, 10), waiting(4, 10)};
  const StepPlan plan = plan_step(f.state(), {.max_num_seqs = 3, .max_step_ms = 1e9}, LinearCost{});
  EXPECT_EQ(admitted(plan), (std::vector<SequenceId>{3}));
}

TEST(Planner, FinishingRequestsKeepTheirSeats) {
  Fixture f;
  f.running = {decoding(1, 10)};
  f.num_finishing_seqs = 1;  // a second admitted request whose last token is in flight
  f.queue = {waiting(3, 10), waiting(4, 10)};
  const StepPlan plan = plan_step(f.state(), {.max_num_seqs = 3, .max_step_ms = 1e9}, LinearCost{});
  EXPECT_EQ(ids(plan.decodes), (std::vector<SequenceId>{1}));
  EXPECT_EQ(admitted(plan), (std::vector<SequenceId>{3}));
}

TEST(Planner, DecodeOutOfBlocksPreemptsTheNewestAdmission) {
  Fixture f;
  // Both decodes sit at a block boundary: each needs a new block; only one is free.
  f.running = {decoding(1, 2 * kBlock), decoding(2, 3 * kBlock), decoding(3, kBlock)};
  for (auto& r : f.running) r.num_allocated_blocks = r.num_computed_tokens / kBlock;
  f.available_blocks = 1;
  const StepPlan plan = plan_step(f.state(), {.max_step_ms = 1e9}, LinearCost{});
  // 1 takes the free block; 2 needs one: 3 (newest) is preempted, freeing 1 block.
  EXPECT_EQ(ids(plan.decodes), (std::vector<SequenceId>{1, 2}));
  EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{3}));
}

// Found by the engine property test (block 2, a tight pool): decode growth
// had taken the blocks admission counted on, and every running request was a
// prefill short of blocks. Nothing ran and nothing preempted: a stall forever.
TEST(Planner, PrefillsAllShortOfBlocksPreemptTheNewestUnderEveryPolicy) {
  for (SchedulingPolicy policy : {SchedulingPolicy::kSluice, SchedulingPolicy::kFcfs, SchedulingPolicy::kRoundRobin,
                                  SchedulingPolicy::kPrefillFirst, SchedulingPolicy::kDecodeFirstTokenBudget}) {
    Fixture f;
    // Each has computed (and holds blocks for) part of its prompt, and needs more.
    f.running = {{.seq_id = 1, .num_tokens = 5 * kBlock, .num_computed_tokens = 2 * kBlock, .num_allocated_blocks = 2},
                 {.seq_id = 2, .num_tokens = 4 * kBlock, .num_computed_tokens = kBlock, .num_allocated_blocks = 1},
                 {.seq_id = 3, .num_tokens = 6 * kBlock, .num_computed_tokens = 3 * kBlock, .num_allocated_blocks = 3}};
    f.queue = {waiting(4, kBlock)};
    f.available_blocks = 0;
    const StepPlan plan = plan_step(f.state(), {.policy = policy, .max_step_ms = 1e9}, LinearCost{});
    EXPECT_TRUE(plan.empty()) << static_cast<int>(policy);
    EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{3})) << static_cast<int>(policy);
    // Blocks on their way back (a store in flight) are waited for instead.
    f.freeing_blocks = 1;
    EXPECT_TRUE(plan_step(f.state(), {.policy = policy, .max_step_ms = 1e9}, LinearCost{}).preempted.empty());
    // A lone request is never preempted by this rule.
    f.freeing_blocks = 0;
    f.running.resize(1);
    EXPECT_TRUE(plan_step(f.state(), {.policy = policy, .max_step_ms = 1e9}, LinearCost{}).preempted.empty());
  }
}

TEST(Planner, LivenessAPrefillGetsABlockEvenWhenDecodesFillTheTime) {
  Fixture f;
  f.running = {decoding(1, 100)};
  f.queue = {waiting(2, 1000)};
  // No prefill share: the liveness rule alone gives the block.
  const StepPlan plan = plan_step(f.state(), {.max_step_ms = 0.5, .min_prefill_share = 0.0}, LinearCost{});
  EXPECT_EQ(plan.decodes.size(), 1u);
  ASSERT_EQ(plan.prefills.size(), 1u);
  EXPECT_EQ(plan.prefills[0].num_new_tokens, kBlock);
}

// Attention priced in 128-row query tiles: a chunk of 16 rows costs as much
// as one of 128 (tile padding), so the liveness chunk takes the whole tile.
class TiledCost final : public CostModel {
 public:
  double predict_step_ms(const StepShape& shape) const override {
    double ms = 1.0;
    for (const auto& s : shape.sequences) {
      const double rows = s.num_new_tokens <= 1 ? s.num_new_tokens : std::ceil(s.num_new_tokens / 128.0) * 128.0;
      ms += 1e-4 * rows * (s.num_computed_tokens + s.num_new_tokens);
    }
    return ms;
  }
};

TEST(Planner, LivenessChunkTakesEveryTokenTheTileAlreadyPaysFor) {
  Fixture f;
  f.running = {decoding(1, 100)};
  // A prompt with a 100k-token cached prefix: 16 rows over it cost within
  // 0.2% of 128 rows, 129 rows cost a second tile.
  SchedRequest prompt = waiting(2, 101000);
  prompt.num_cached_tokens = 100000;
  f.queue = {prompt};
  // Decodes alone exceed the cap: only the liveness rule admits prefill.
  const StepPlan plan = plan_step(f.state(), {.max_step_ms = 0.5, .min_prefill_share = 0.0}, TiledCost{});
  ASSERT_EQ(plan.prefills.size(), 1u);
  EXPECT_EQ(plan.prefills[0].num_new_tokens, 128);
  // A rest shorter than a tile is taken whole.
  prompt.num_tokens = 100040;
  f.queue = {prompt};
  const StepPlan short_rest = plan_step(f.state(), {.max_step_ms = 0.5, .min_prefill_share = 0.0}, TiledCost{});
  ASSERT_EQ(short_rest.prefills.size(), 1u);
  EXPECT_EQ(short_rest.prefills[0].num_new_tokens, 40);
  // Without a prefix the tile's own rows dominate: one block, as before.
  f.queue = {waiting(2, 1000)};
  const StepPlan cold = plan_step(f.state(), {.max_step_ms = 0.5, .min_prefill_share = 0.0}, TiledCost{});
  ASSERT_EQ(cold.prefills.size(), 1u);
  EXPECT_EQ(cold.prefills[0].num_new_tokens, kBlock);
}

// Attention priced by 128-row tiles over the prefix, plus a per-row GEMM cost.
class TiledRowsCost final : public CostModel {
 public:
  double predict_step_ms(const StepShape& shape) const override {
    double ms = 1.0;
    for (const auto& s : shape.sequences) {
      const double rows = s.num_new_tokens <= 1 ? s.num_new_tokens : std::ceil(s.num_new_tokens / 128.0) * 128.0;
      ms += 0.02 * s.num_new_tokens + 1e-6 * rows * (s.num_computed_tokens + s.num_new_tokens);
    }
    return ms;
  }
  std::int32_t query_tile_rows() const override { return 128; }
};

TEST(Planner, AChunkEndingInAMostlyEmptyTileIsCutToItsFullTiles) {
  Fixture f;
  SchedRequest prompt = waiting(1, 200000);
  prompt.num_cached_tokens = 100000;
  f.queue = {prompt};
  // Over 100k keys: 256 rows (2 tiles) ~31.8 ms, 272 rows (3 tiles) ~44.9.
  // Under 45 ms the time cap alone takes 272: its last 16 rows cost ~0.8 ms
  // each against ~0.12 for the first 256.
  const StepPlan cut = plan_step(f.state(), {.max_step_ms = 45.0}, TiledRowsCost{});
  ASSERT_EQ(cut.prefills.size(), 1u);
  EXPECT_EQ(cut.prefills[0].num_new_tokens, 256);
  // Under 46 ms it takes 320: 64 rows in the third tile, ~0.22 ms each (less
  // than twice the full tiles' rate): kept.
  const StepPlan kept = plan_step(f.state(), {.max_step_ms = 46.0}, TiledRowsCost{});
  ASSERT_EQ(kept.prefills.size(), 1u);
  EXPECT_EQ(kept.prefills[0].num_new_tokens, 320);
  // Without a tile the same costs keep the 272.
  class Untiled final : public CostModel {
   public:
    double predict_step_ms(const StepShape& shape) const override { return TiledRowsCost{}.predict_step_ms(shape); }
  };
  const StepPlan untiled = plan_step(f.state(), {.max_step_ms = 45.0}, Untiled{});
  ASSERT_EQ(untiled.prefills.size(), 1u);
  EXPECT_EQ(untiled.prefills[0].num_new_tokens, 272);
}

// A chunk of more than one row pays 40 ms whatever its rows (MLA's K/V
// decompression over its prefix), then 0.1 ms a row; a decode 0.5 ms.
class FixedChunkCost final : public CostModel {
 public:
  double predict_step_ms(const StepShape& shape) const override {
    double ms = 1.0;
    for (const auto& s : shape.sequences)
      ms += s.num_new_tokens > 1 ? 40.0 + 0.1 * s.num_new_tokens : 0.5 * s.num_new_tokens;
    return ms;
  }
};

TEST(Planner, AChunkAloneGrowsUntilItsFixedCostIsAQuarterOfIt) {
  Fixture f;
  f.queue = {waiting(1, 100000)};
  // Under 50 ms: 1 + 40 + 0.1 k <= 50 gives 90 rows (80 on block ends), 86%
  // of the step fixed. Alone, it grows to 1 + 40 / 0.25 = 161 ms: 1,200 rows,
  // the 40 ms a quarter of the chunk's 160.
  const StepPlan alone = plan_step(f.state(), {.max_step_ms = 50.0}, FixedChunkCost{});
  ASSERT_EQ(alone.prefills.size(), 1u);
  EXPECT_EQ(alone.prefills[0].num_new_tokens, 1200);
  // Never past 4 x max_step_ms: under 20 ms, 80 ms at most (390 rows, 384 on block ends).
  const StepPlan bounded = plan_step(f.state(), {.max_step_ms = 20.0}, FixedChunkCost{});
  ASSERT_EQ(bounded.prefills.size(), 1u);
  EXPECT_EQ(bounded.prefills[0].num_new_tokens, 384);
  // A decode in the step without long steps: its inter-token target holds
  // (1.5 + 40 + 0.1 k <= 50: 80 rows).
  f.running = {decoding(2, 1000)};
  const StepPlan with_decode =
      plan_step(f.state(), {.max_step_ms = 50.0, .max_token_gap_ms = 50.0}, FixedChunkCost{});
  ASSERT_EQ(with_decode.prefills.size(), 1u);
  EXPECT_EQ(with_decode.prefills[0].num_new_tokens, 80);
  EXPECT_EQ(with_decode.decode_overrun_ms, 0.0);
  // Nor with decodes on the other lane.
  f.running.clear();
  SchedState other_lane = f.state();
  other_lane.num_other_lane_seqs = 1;
  const StepPlan beside_lane = plan_step(other_lane, {.max_step_ms = 50.0}, FixedChunkCost{});
  ASSERT_EQ(beside_lane.prefills.size(), 1u);
  EXPECT_EQ(beside_lane.prefills[0].num_new_tokens, 80);
}

// Beside decodes, a chunk that is mostly its fixed cost runs one long step of
// up to max_token_gap_ms; the steps after it pay the overrun back, decodes
// only, so the decodes keep max_step_ms on average.
TEST(Planner, ALongStepBesideDecodesIsPaidBackBeforeTheNext) {
  Fixture f;
  f.queue = {waiting(1, 100000)};
  f.running = {decoding(2, 1000)};
  const SchedConfig config{.max_step_ms = 50.0, .max_token_gap_ms = 150.0};
  // 1.5 + 40 + 0.1 k <= 150: 1,085 rows, 1,072 on block ends; 148.7 ms.
  const StepPlan long_step = plan_step(f.state(), config, FixedChunkCost{});
  ASSERT_EQ(long_step.decodes.size(), 1u);
  ASSERT_EQ(long_step.prefills.size(), 1u);
  EXPECT_EQ(long_step.prefills[0].num_new_tokens, 1072);
  EXPECT_NEAR(long_step.predicted_step_ms, 148.7, 1e-9);
  EXPECT_NEAR(long_step.decode_overrun_ms, 98.7, 1e-9);

  // The prompt is running now; each payback step is its decode alone (1.5 ms
  // pays 48.5), until the overrun is gone.
  f.queue.clear();
  const SchedRequest prompt{.seq_id = 1, .num_tokens = 100000, .num_computed_tokens = 1072,
                            .num_allocated_blocks = 1072 / kBlock};
  f.running = {decoding(2, 1001), prompt};
  std::vector<double> overruns;
  SchedState state = f.state();
  state.decode_overrun_ms = long_step.decode_overrun_ms;
  for (int step = 0; step < 3; ++step) {
    const StepPlan payback = plan_step(state, config, FixedChunkCost{});
    EXPECT_EQ(payback.decodes.size(), 1u);
    EXPECT_TRUE(payback.prefills.empty()) << "step " << step;
    overruns.push_back(payback.decode_overrun_ms);
    state.decode_overrun_ms = payback.decode_overrun_ms;
  }
  ASSERT_EQ(overruns.size(), 3u);
  EXPECT_NEAR(overruns[0], 50.2, 1e-9);
  EXPECT_NEAR(overruns[1], 1.7, 1e-9);
  EXPECT_EQ(overruns[2], 0.0);
  // Paid back: the next long step. Four tokens in 153.2 ms, 26 tok/s.
  const StepPlan next_long = plan_step(state, config, FixedChunkCost{});
  ASSERT_EQ(next_long.prefills.size(), 1u);
  EXPECT_EQ(next_long.prefills[0].num_new_tokens, 1072);
  EXPECT_GT(next_long.decode_overrun_ms, 0.0);

  // A chunk with no fixed cost never runs long, and the liveness block that
  // takes its step past max_step_ms is no debt.
  const StepPlan linear = plan_step(f.state(), {.max_step_ms = 1.05, .min_prefill_share = 0.0}, LinearCost{});
  ASSERT_EQ(linear.prefills.size(), 1u);
  EXPECT_EQ(linear.prefills[0].num_new_tokens, kBlock);
  EXPECT_GT(linear.predicted_step_ms, 1.05);
  EXPECT_EQ(linear.decode_overrun_ms, 0.0);
  // Nor does any step when decodes alone nearly fill max_step_ms (the prefill
  // share's regime): a debt carried in is dropped.
  for (SequenceId i = 10; i < 110; ++i) f.running.push_back(decoding(i, 1000));
  SchedState busy = f.state();
  busy.decode_overrun_ms = 98.7;
  const StepPlan share = plan_step(busy, config, FixedChunkCost{});
  EXPECT_GT(share.predicted_step_ms, config.max_step_ms);
  EXPECT_EQ(share.decode_overrun_ms, 0.0);
}

TEST(Planner, IsAPureFunction) {
  Fixture f;
  for (SequenceId i = 0; i < 50; ++i) f.running.push_back(decoding(i, 1000 + static_cast<std::int32_t>(i) * 37));
  for (SequenceId i = 50; i < 70; ++i) f.queue.push_back(waiting(i, 100 + static_cast<std::int32_t>(i) * 911, static_cast<double>(i)));
  const SchedConfig config{.max_step_ms = 30};
  const StepPlan a = plan_step(f.state(), config, LinearCost{});
  const StepPlan b = plan_step(f.state(), config, LinearCost{});
  EXPECT_EQ(ids(a.decodes), ids(b.decodes));
  EXPECT_EQ(ids(a.prefills), ids(b.prefills));
  EXPECT_EQ(a.predicted_step_ms, b.predicted_step_ms);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(Planner, AdmissionDoesNotEvictProtectedPrefixesWhileOthersRun) {
  Fixture f;
  f.running = {decoding(1, 10 * kBlock)};
  f.running[0].num_allocated_blocks = 11;
  f.queue = {waiting(2, 50 * kBlock)};
  f.available_blocks = 80;
  const SchedConfig config{.max_num_batched_tokens = 16, .max_step_ms = 1e9};
  // 80 available, of which 40 hold protected prefixes: 40 < 50 needed.
  SchedState state = f.state();
  state.num_protected_blocks = 40;
  EXPECT_TRUE(admitted(plan_step(state, config, LinearCost{})).empty());
  state.num_protected_blocks = 30;
  EXPECT_EQ(admitted(plan_step(state, config, LinearCost{})), (std::vector<SequenceId>{2}));
  // With nothing else running the protected blocks are fair game (liveness).
  f.running.clear();
  state = f.state();
  state.num_protected_blocks = 40;
  EXPECT_EQ(admitted(plan_step(state, config, LinearCost{})), (std::vector<SequenceId>{2}));
}

// Decodes at 1 ms a row, prefill at 0.01 ms a token, 1 ms fixed: many decoders
// alone overrun the step target.
class DecodeHeavyCost final : public CostModel {
 public:
  double predict_step_ms(const StepShape& shape) const override {
    double ms = 1.0;
    for (const auto& s : shape.sequences) ms += s.num_new_tokens == 1 ? 1.0 : 0.01 * s.num_new_tokens;
    return ms;
  }
};

// Two regimes. Cheap decodes: the step stays under max_step_ms (the
// inter-token target). Decodes that alone overrun it: the step grows so that
// prefill keeps min_prefill_share of its time, instead of one block a step.
TEST(Planner, PrefillKeepsItsShareWhenDecodesFillTheStep) {
  Fixture f;
  for (SequenceId id = 1; id <= 60; ++id) f.running.push_back(decoding(id, 1000));
  f.queue = {waiting(100, 500000)};
  const DecodeHeavyCost cost;
  const double decode_ms = 61.0;  // 1 fixed + 60 rows, over the 50 ms target

  const StepPlan starved = plan_step(
      f.state(), {.max_num_batched_tokens = 100000, .max_step_ms = 50.0, .min_prefill_share = 0.0}, cost);
  ASSERT_EQ(starved.prefills.size(), 1u);
  EXPECT_EQ(starved.prefills[0].num_new_tokens, kBlock);  // only the liveness block

  for (double share : {0.25, 0.5}) {
    const StepPlan plan = plan_step(
        f.state(), {.max_num_batched_tokens = 100000, .max_step_ms = 50.0, .min_prefill_share = share}, cost);
    EXPECT_EQ(plan.decodes.size(), 60u);
    ASSERT_EQ(plan.prefills.size(), 1u);
    const double cap_ms = decode_ms / (1.0 - share);
    const double prefill_ms = 0.01 * plan.prefills[0].num_new_tokens;
    EXPECT_LE(plan.predicted_step_ms, cap_ms + 1e-9) << share;
    // The largest block-aligned chunk under the cap: its share of the step is
    // the promised one, less at most one block.
    EXPECT_GT(prefill_ms + 0.01 * kBlock, share * cap_ms) << share;
    EXPECT_EQ(plan.prefills[0].num_new_tokens % kBlock, 0) << share;
  }

  // Cheap decodes: the share changes nothing, the target holds.
  Fixture light;
  light.running = {decoding(1, 1000), decoding(2, 1000)};
  light.queue = {waiting(100, 500000)};
  const StepPlan plan = plan_step(
      light.state(), {.max_num_batched_tokens = 100000, .max_step_ms = 50.0, .min_prefill_share = 0.25}, cost);
  EXPECT_LE(plan.predicted_step_ms, 50.0);
  ASSERT_EQ(plan.prefills.size(), 1u);
  EXPECT_EQ(plan.prefills[0].num_new_tokens, 4688);  // (50 - 3) / 0.01, block-aligned
}

// Host-tier hits: load when blocks x ms_per_block < the recompute price of
// those tokens at their position (LinearCost less its fixed 1 ms and the
// one-token step: 0.01 x (n - 1) + 1e-6 x (n x (c + n) - (c + 1))).
double recompute_ms(std::int32_t n, std::int32_t c) {
  return 0.01 * (n - 1) + 1e-6 * (static_cast<double>(n) * (c + n) - (c + 1));
}

TEST(PlannerHostTier, LoadsWhenCheaperThanRecomputingAndRunsNothingMeanwhile) {
  Fixture f;
  f.running = {decoding(1, 500)};
  SchedRequest r = waiting(2, 5000);
  r.num_cached_tokens = 1024;
  r.num_host_hit_tokens = 2048;  // 128 blocks
  f.queue = {r};
  SchedConfig config;
  // 2048 tokens at 1024 cost ~26.6 ms to recompute: 0.1 ms a block (12.8 ms) is cheaper.
  ASSERT_LT(128 * 0.1, recompute_ms(2048, 1024));
  config.host_load_ms_per_block = 0.1;
  StepPlan plan = plan_step(f.state(), config, LinearCost());
  ASSERT_EQ(plan.prefills.size(), 1u);
  EXPECT_TRUE(plan.prefills[0].admits);
  EXPECT_EQ(plan.prefills[0].num_load_tokens, 2048);
  EXPECT_EQ(plan.prefills[0].num_new_tokens, 0) << "it computes once its prefix has landed";
  EXPECT_EQ(plan.decodes.size(), 1u) << "the decode is not held back by the copy";

  // 0.3 ms a block (38.4 ms) is dearer than recomputing: a normal chunk from the device hit.
  ASSERT_GT(128 * 0.3, recompute_ms(2048, 1024));
  config.host_load_ms_per_block = 0.3;
  plan = plan_step(f.state(), config, LinearCost());
  ASSERT_EQ(plan.prefills.size(), 1u);
  EXPECT_EQ(plan.prefills[0].num_load_tokens, 0);
  EXPECT_GT(plan.prefills[0].num_new_tokens, 0);

  config.host_load_ms_per_block = 0.0;  // no host tier
  plan = plan_step(f.state(), config, LinearCost());
  EXPECT_EQ(plan.prefills.at(0).num_load_tokens, 0);
}

TEST(PlannerHostTier, LoadsAStepStartsAreCappedByItsTimeCap) {
  Fixture f;
  std::vector<SchedRequest> queue;
  for (SequenceId id = 1; id <= 3; ++id) {
    SchedRequest r = waiting(id, 9000, static_cast<double>(id));
    r.num_host_hit_tokens = 8192;  // 512 blocks: 30.7 ms at 0.06 ms a block
    queue.push_back(r);
  }
  f.queue = queue;
  SchedConfig config;
  config.policy = SchedulingPolicy::kFcfs;
  config.max_step_ms = 50.0;
  config.host_load_ms_per_block = 0.06;
  const StepPlan plan = plan_step(f.state(), config, LinearCost());
  std::int32_t num_loading = 0;
  for (const ScheduledChunk& c : plan.prefills) num_loading += c.num_load_tokens > 0 ? 1 : 0;
  // The first (30.7 ms) fits the 50 ms cap, a second would not (61 ms): it recomputes or waits.
  EXPECT_EQ(num_loading, 1);
  EXPECT_EQ(plan.prefills.at(0).seq_id, 1u);
  EXPECT_EQ(plan.prefills.at(0).num_load_tokens, 8192);
}

// Swap on preempt: a victim with c computed tokens (c / 16 full blocks) is
// swapped when 2 x blocks x ms_per_block < recompute_ms(full tokens, 0).
TEST(PlannerHostTier, PreemptionSwapsWhenStoreAndLoadAreCheaperThanRecomputing) {
  Fixture f;
  // 1 and 2 need a block each; one is free; 3 (newest, 4000 tokens: 250 full blocks) is the victim.
  f.running = {decoding(1, 2 * kBlock), decoding(2, 3 * kBlock), decoding(3, 4000)};
  for (auto& r : f.running) r.num_allocated_blocks = r.num_computed_tokens / kBlock;
  f.running[2].num_allocated_blocks = 251;  // its full blocks + a partial one
  f.available_blocks = 1;
  SchedConfig config{.max_step_ms = 1e9};
  // 250 blocks x 2 x 0.05 ms = 25 ms < recomputing 4000 tokens (~56 ms): swap.
  ASSERT_LT(2 * 250 * 0.05, recompute_ms(4000, 0));
  config.host_load_ms_per_block = 0.05;
  StepPlan plan = plan_step(f.state(), config, LinearCost{});
  EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{3}));
  EXPECT_EQ(plan.swapped, (std::vector<SequenceId>{3}));
  // Its partial block is free at once and 2 takes it: no second victim.
  EXPECT_EQ(ids(plan.decodes), (std::vector<SequenceId>{1, 2}));

  // 0.2 ms a block (100 ms) is dearer: recompute, as without a host tier.
  ASSERT_GT(2 * 250 * 0.2, recompute_ms(4000, 0));
  config.host_load_ms_per_block = 0.2;
  plan = plan_step(f.state(), config, LinearCost{});
  EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{3}));
  EXPECT_TRUE(plan.swapped.empty());
  config.host_load_ms_per_block = 0.0;
  plan = plan_step(f.state(), config, LinearCost{});
  EXPECT_TRUE(plan.swapped.empty());
}

TEST(PlannerHostTier, ADecodeWaitsForBlocksStoresAreFreeingInsteadOfPreempting) {
  Fixture f;
  f.running = {decoding(1, 2 * kBlock), decoding(2, 3 * kBlock), decoding(3, kBlock + 4)};
  for (auto& r : f.running) r.num_allocated_blocks = r.num_computed_tokens / kBlock;
  f.running[2].num_allocated_blocks = 2;  // 3 has room for its token
  f.available_blocks = 1;
  f.freeing_blocks = 1;  // a store in flight gives one back when it lands
  SchedConfig config{.max_step_ms = 1e9, .host_load_ms_per_block = 0.05};
  StepPlan plan = plan_step(f.state(), config, LinearCost{});
  // 1 takes the free block, 2 waits a step for the freeing one, 3 (needs none) decodes.
  EXPECT_TRUE(plan.preempted.empty());
  EXPECT_EQ(ids(plan.decodes), (std::vector<SequenceId>{1, 3}));
  // Without that store, 2 preempts 3 (the newest) as before.
  f.freeing_blocks = 0;
  plan = plan_step(f.state(), config, LinearCost{});
  EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{3}));
}

}  // namespace
}  // namespace sluice
