// Two step loops on the sim (--device sim --decode-lane sms:N): the engine's
// decode lane on a sim lane of 16 of the H200's SMs, the prefill lane on the
// rest (sim_backend.h). The planner believes the whole GPU; the sim's truth
// prices each lane on its share, so what the test sees is not the planner's
// own prediction.
//   - On the wall clock without pacing: while a 32k-token prompt prefills in
//     chunks, the chats decode on their lane; every request ends with its
//     tokens and every block comes back.
//   - On the virtual clock: the issue-14 burst at a smaller scale (8 chats,
//     then 4 prompts of 16k-64k), two lanes against prefill-first's one loop,
//     replayed twice for the same timelines; and the long prompts' decodes
//     off a lane of 8 SMs against on it.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sluice/engine/engine.h"
#include "sluice/sim/engine_replay.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/sim_backend.h"

namespace sluice {
namespace {

TEST(DecodeLaneOnTheSim, ChatsDecodeOnTheirLaneWhileALongPromptPrefills) {
  const sim::ModelProfile llama = *sim::find_profile("llama-3-8b");
  auto backend = sim::make_sim_backend(llama, sim::h200_sluice_cuda(), {}, {});
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  EngineConfig config;
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 2048;
  config.decode_lane = DecodeLane::kSms;
  config.decode_lane_sms = 16;
  config.clock = ClockMode::kWall;
  std::unique_ptr<Backend> main = std::move(backend).value();
  auto lane = make_decode_lane(*main, config);
  ASSERT_TRUE(lane.ok()) << lane.error_message();
  Engine engine(std::move(main), nullptr, config, std::move(lane).value());

  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  auto submit = [&](const std::string& id, std::int32_t prompt_len, std::int32_t max_tokens) {
    std::vector<TokenId> prompt(static_cast<std::size_t>(prompt_len));
    for (std::int32_t i = 0; i < prompt_len; ++i) prompt[i] = (i * 7 + static_cast<std::int32_t>(id.size())) % 30000;
    auto s = engine.submit({.request_id = id, .prompt_token_ids = prompt, .max_tokens = max_tokens});
    ASSERT_TRUE(s.ok()) << s.error_message();
    streams[id] = *s;
  };
  for (int c = 0; c < 4; ++c) submit("chat" + std::to_string(c), 512, 64);
  // The chats prefill and start decoding before the long prompt arrives.
  for (int step = 0; step < 8 && engine.has_work(); ++step) engine.step();
  submit("long", 32768, 4);
  for (int step = 0; step < 100000 && engine.has_work(); ++step) {
    engine.step();
    engine.check_invariants();
  }
  ASSERT_FALSE(engine.has_work());
  for (auto& [id, s] : streams) {
    std::size_t tokens = 0;
    bool finished = false;
    while (auto o = s->poll()) {
      tokens += o->tokens.size();
      finished = finished || o->finished();
      EXPECT_TRUE(!o->finished() || o->finish_reason == FinishReason::kLength) << id << ": " << o->error_message;
    }
    EXPECT_TRUE(finished) << id;
    EXPECT_EQ(tokens, id == "long" ? 4u : 64u) << id;
  }
  const EngineStats stats = engine.stats();
  EXPECT_GT(stats.num_decode_lane_steps, 0) << "the chats decoded on their lane during the long prompt's chunks";
  EXPECT_GT(stats.num_main_lane_decode_steps, 0) << "with nothing to prefill, the main lane decoded";
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
}

// The burst on the virtual clock: 8 chats of 512-token prompts decoding 600
// tokens, then 4 long prompts (16k, 64k, 32k, 48k) within 2 s, 16 tokens each.
struct BurstShape {
  std::int32_t lane_sms = 16;
  std::int32_t decode_lane_max_context = 0;  // 0: from the cost model (about 30k here)
  std::int32_t long_output_tokens = 16;
  double decode_lane_interval_ms = 0.0;
};
sim::ReplayOutcome burst(SchedulingPolicy policy, DecodeLane lane, BurstShape shape = {}) {
  const sim::ModelProfile llama = *sim::find_profile("llama-3-8b");
  const sim::HardwareSpec hardware = sim::h200_sluice_cuda();
  auto backend = sim::make_sim_backend(llama, hardware, {}, {});
  EXPECT_TRUE(backend.ok()) << backend.error_message();
  EngineConfig config;
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 8192;
  config.scheduling = policy;
  config.decode_lane = lane;
  config.decode_lane_sms = lane == DecodeLane::kSms ? shape.lane_sms : 0;
  config.decode_lane_max_context = shape.decode_lane_max_context;
  config.decode_lane_interval_ms = shape.decode_lane_interval_ms;
  config.clock = ClockMode::kVirtual;
  std::unique_ptr<Backend> main = std::move(backend).value();
  auto made = make_decode_lane(*main, config);
  EXPECT_TRUE(made.ok()) << made.error_message();
  Engine engine(std::move(main), std::make_shared<sim::RooflineCostModel>(llama, hardware, sim::Parallelism{}), config,
                std::move(made).value());
  std::vector<sim::TimedRequest> workload;
  for (int c = 0; c < 8; ++c)
    workload.push_back({.arrival_ms = 0.0,
                        .request = {.request_id = "chat" + std::to_string(c),
                                    .prompt_token_ids = sim::synthetic_tokens(c, 512, 32000),
                                    .max_tokens = 600}});
  const std::int32_t lengths[] = {16384, 65536, 32768, 49152};
  for (int p = 0; p < 4; ++p)
    workload.push_back({.arrival_ms = 1000.0 + 500.0 * p,
                        .request = {.request_id = "long" + std::to_string(p),
                                    .prompt_token_ids = sim::synthetic_tokens(100 + p, lengths[p], 32000),
                                    .max_tokens = shape.long_output_tokens}});
  sim::ReplayOutcome outcome = sim::replay(engine, std::move(workload), 200000);
  EXPECT_TRUE(outcome.drained);
  EXPECT_EQ(outcome.timelines.size(), 12u);
  return outcome;
}

// The chats' longest gap while the long prompts prefill (from the first long
// arrival to the last first token), and the long prompts' mean TTFT.
struct BurstSummary {
  double chat_gap_ms = 0.0, mean_ttft_ms = 0.0, last_first_token_ms = 0.0;
};
BurstSummary summarize(const sim::ReplayOutcome& outcome) {
  BurstSummary s;
  for (const auto& [id, t] : outcome.timelines)
    if (id.starts_with("long")) {
      s.mean_ttft_ms += (*t.first_token_ms - t.arrival_ms) / 4;
      s.last_first_token_ms = std::max(s.last_first_token_ms, *t.first_token_ms);
    }
  for (const auto& [id, t] : outcome.timelines)
    if (id.starts_with("chat"))
      for (std::size_t i = 1; i < t.token_ms.size(); ++i)
        if (t.token_ms[i] > 1000.0 && t.token_ms[i - 1] < s.last_first_token_ms)
          s.chat_gap_ms = std::max(s.chat_gap_ms, t.token_ms[i] - t.token_ms[i - 1]);
  return s;
}

TEST(DecodeLaneOnTheSim, TheBurstOnTheVirtualClockKeepsChatsFlowingNearPrefillFirstsTtft) {
  const sim::ReplayOutcome lanes = burst(SchedulingPolicy::kSluice, DecodeLane::kSms);
  const sim::ReplayOutcome prefill_first = burst(SchedulingPolicy::kPrefillFirst, DecodeLane::kOff);
  const BurstSummary two = summarize(lanes), one = summarize(prefill_first);
  std::printf("two lanes (sms:16): chats' longest gap %.0f ms, mean TTFT %.0f ms, last first token %.0f ms\n",
              two.chat_gap_ms, two.mean_ttft_ms, two.last_first_token_ms);
  std::printf("prefill-first: chats' longest gap %.0f ms, mean TTFT %.0f ms, last first token %.0f ms\n",
              one.chat_gap_ms, one.mean_ttft_ms, one.last_first_token_ms);
  EXPECT_GT(lanes.stats.num_decode_lane_steps, 0);
  EXPECT_GT(lanes.stats.num_steps_beside_other_lane, 0);
  // Prefill-first stops the chats for the whole prefill; the decode lane never does.
  EXPECT_GT(one.chat_gap_ms, 5000.0);
  EXPECT_LT(two.chat_gap_ms, 150.0);
  // The prefill lane has 116 of 132 SMs, and beside the lane its compute
  // costs 1.08x more again (hardware.cpp, measured in S16): its prompts
  // finish later than prefill-first's by about that, not by the decodes'
  // whole time.
  EXPECT_GT(two.last_first_token_ms, one.last_first_token_ms);
  EXPECT_LT(two.last_first_token_ms, 1.25 * one.last_first_token_ms);
  // The same replay gives the same timelines: the lanes' order on the virtual
  // clock does not depend on which worker thread answered first.
  const sim::ReplayOutcome again = burst(SchedulingPolicy::kSluice, DecodeLane::kSms);
  for (const auto& [id, t] : lanes.timelines) {
    EXPECT_EQ(again.timelines.at(id).first_token_ms, t.first_token_ms) << id;
    EXPECT_EQ(again.timelines.at(id).token_ms, t.token_ms) << id;
  }
}

// The chats' mean time between tokens while the long prompts decode (from
// the first long prompt's first token to the last one's end).
double chat_itl_while_long_prompts_decode_ms(const sim::ReplayOutcome& outcome) {
  double from = 1e300, to = 0.0;
  for (const auto& [id, t] : outcome.timelines)
    if (id.starts_with("long")) {
      from = std::min(from, *t.first_token_ms);
      to = std::max(to, t.token_ms.back());
    }
  double sum = 0.0;
  int n = 0;
  for (const auto& [id, t] : outcome.timelines)
    if (id.starts_with("chat"))
      for (std::size_t i = 1; i < t.token_ms.size(); ++i)
        if (t.token_ms[i - 1] >= from && t.token_ms[i] <= to) {
          sum += t.token_ms[i] - t.token_ms[i - 1];
          ++n;
        }
  EXPECT_GT(n, 100) << "the chats decode through the long prompts' decodes";
  return n > 0 ? sum / n : 0.0;
}

// On a lane of 8 SMs, the long prompts' decodes (32k-64k contexts, past the
// cost model's bound of about 30k) slow every chat's step beside them; in the
// prefill lane's chunks they do not. The 16k prompt's decode stays on the lane.
TEST(DecodeLaneOnTheSim, LongContextDecodesOffTheLaneKeepTheChatsFast) {
  const BurstShape bounded{.lane_sms = 8, .decode_lane_max_context = 0, .long_output_tokens = 64};
  BurstShape unbounded = bounded;
  unbounded.decode_lane_max_context = 1 << 20;
  const sim::ReplayOutcome off_lane = burst(SchedulingPolicy::kSluice, DecodeLane::kSms, bounded);
  const sim::ReplayOutcome on_lane = burst(SchedulingPolicy::kSluice, DecodeLane::kSms, unbounded);
  const double off_ms = chat_itl_while_long_prompts_decode_ms(off_lane);
  const double on_ms = chat_itl_while_long_prompts_decode_ms(on_lane);
  std::printf("chats' mean inter-token time while the long prompts decode, sms:8: %.1f ms with them off the lane, "
              "%.1f ms on it\n", off_ms, on_ms);
  EXPECT_LT(off_ms, 0.9 * on_ms);
  // Their first tokens do not suffer for it: the long decodes cost the chunks little.
  const BurstSummary off = summarize(off_lane), on = summarize(on_lane);
  EXPECT_LT(off.mean_ttft_ms, 1.05 * on.mean_ttft_ms);
}

// A paced lane (--decode-lane-interval-ms 40) starts a step no sooner than
// 40 ms after the last one began: the chats get a token every 40 ms at most
// while the long prompts prefill, where back to back they get one every
// ~17 ms, and the prompts beside them prefill sooner (the sim prices the
// lane's HBM traffic into the prefill lane's steps); every chat still
// finishes, and the same replay gives the same timelines.
TEST(DecodeLaneOnTheSim, APacedLaneGivesTheChatsATokenPerInterval) {
  const sim::ReplayOutcome paced =
      burst(SchedulingPolicy::kSluice, DecodeLane::kSms, {.decode_lane_interval_ms = 40.0});
  const sim::ReplayOutcome back_to_back = burst(SchedulingPolicy::kSluice, DecodeLane::kSms);
  const double paced_ms = chat_itl_while_long_prompts_decode_ms(paced);
  const double back_to_back_ms = chat_itl_while_long_prompts_decode_ms(back_to_back);
  std::printf("chats' mean inter-token time while the long prompts decode: %.1f ms paced at 40, %.1f back to back\n",
              paced_ms, back_to_back_ms);
  EXPECT_LT(back_to_back_ms, 30.0);
  EXPECT_GT(paced_ms, 39.5);
  EXPECT_LT(paced_ms, 45.0);
  // The paced lane reads the weights less often: the prompts beside it prefill sooner.
  const BurstSummary paced_burst = summarize(paced), back_to_back_burst = summarize(back_to_back);
  std::printf("last first token: %.0f ms paced, %.0f ms back to back\n", paced_burst.last_first_token_ms,
              back_to_back_burst.last_first_token_ms);
  EXPECT_LT(paced_burst.last_first_token_ms, 0.98 * back_to_back_burst.last_first_token_ms);
  // While the long prompts prefill (from just after the first arrives, at
  // 1 s: the main lane's decode step then in flight is not paced), the chats
  // decode on the lane only. Steps start 40 ms apart and a token comes at a
  // step's end, so two tokens are 40 ms apart give or take the difference of
  // two steps' times (a few ms).
  for (const auto& [id, t] : paced.timelines) {
    if (!id.starts_with("chat")) continue;
    EXPECT_EQ(t.token_ms.size(), 600u) << id;
    for (std::size_t i = 1; i < t.token_ms.size(); ++i) {
      if (t.token_ms[i - 1] > 1100.0 && t.token_ms[i] < summarize(paced).last_first_token_ms) {
        ASSERT_GE(t.token_ms[i] - t.token_ms[i - 1], 35.0) << id << " token " << i << " at " << t.token_ms[i];
      }
    }
  }
  const sim::ReplayOutcome again =
      burst(SchedulingPolicy::kSluice, DecodeLane::kSms, {.decode_lane_interval_ms = 40.0});
  for (const auto& [id, t] : paced.timelines) EXPECT_EQ(again.timelines.at(id).token_ms, t.token_ms) << id;
}

// A returning prefix loads from the host tier while two chats decode on the
// decode lane (issue 17's sessions at a small scale: 64-token pages, as
// serve's). With nothing to compute, the main lane waits for the copies; the
// sim lands a whole batch of them per wait, as the CUDA backend does (one
// event a batch), so the load costs the engine a few rounds. Waiting per
// block cost a round per block (640 for a 40k prefix), each with host time
// that serve's paced sim added to the load: S20-5's sim loaded at 28% of the
// link under the lane, the H200 at 97%.
TEST(DecodeLaneOnTheSim, AHostLoadTakesTheEngineAFewRoundsNotOnePerBlock) {
  constexpr std::int32_t kBlockTokens = 64, kPrefixTokens = 16384;  // 256 pages
  const sim::ModelProfile llama = *sim::find_profile("llama-3-8b");
  const sim::HardwareSpec hardware = sim::h200_sluice_cuda();
  sim::SimBackendOptions options;
  options.memory.block_size_tokens = kBlockTokens;
  options.num_kv_blocks_override = 384;  // 24k tokens: the prefix and the next prompt do not fit together
  auto backend = sim::make_sim_backend(llama, hardware, {}, options);
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  EngineConfig config;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 4096;
  config.decode_lane = DecodeLane::kSms;
  config.decode_lane_sms = 8;
  config.clock = ClockMode::kVirtual;
  std::unique_ptr<Backend> main = std::move(backend).value();
  config.kv_offloading_bytes = 1024 * main->info().kv_bytes_per_block;
  const double copy_ms = static_cast<double>(main->info().kv_bytes_per_block) / main->info().host_link_bytes_per_s * 1e3;
  auto lane = make_decode_lane(*main, config);
  ASSERT_TRUE(lane.ok()) << lane.error_message();
  Engine engine(std::move(main), std::make_shared<sim::RooflineCostModel>(llama, hardware, sim::Parallelism{}), config,
                std::move(lane).value());

  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  auto submit = [&](const std::string& id, std::vector<TokenId> prompt, std::int32_t max_tokens) {
    auto s = engine.submit({.request_id = id, .prompt_token_ids = std::move(prompt), .max_tokens = max_tokens});
    ASSERT_TRUE(s.ok()) << s.error_message();
    streams[id] = *s;
  };
  auto step_until = [&](auto done) {
    for (int round = 0; round < 100000 && !done(); ++round) {
      engine.step();
      engine.check_invariants();
    }
    ASSERT_TRUE(done());
  };
  const std::vector<TokenId> prefix = sim::synthetic_tokens(7, kPrefixTokens, 32000);
  for (int c = 0; c < 2; ++c) submit("chat" + std::to_string(c), sim::synthetic_tokens(c, 512, 32000), 4000);
  submit("first", prefix, 1);
  step_until([&] { return streams["first"]->finished(); });
  // Another prompt of the prefix's size takes its pages: demotion moves them to the host.
  submit("other", sim::synthetic_tokens(8, kPrefixTokens, 32000), 1);
  step_until([&] { return streams["other"]->finished(); });

  std::vector<TokenId> returning = prefix;
  const std::vector<TokenId> message = sim::synthetic_tokens(9, kBlockTokens, 32000);
  returning.insert(returning.end(), message.begin(), message.end());
  submit("return", returning, 1);
  step_until([&] { return engine.stats().host_loaded_blocks > 0; });
  const std::int64_t num_loaded_blocks = engine.stats().host_loaded_blocks;
  std::int64_t num_rounds = 0;
  for (; num_rounds < 100000 && engine.stats().host_num_loads == 0; ++num_rounds) {
    engine.step();
    engine.check_invariants();
  }
  const EngineStats loaded = engine.stats();
  std::printf("a load of %lld pages under the decode lane: %lld rounds of the engine, %.1f ms (the link: %.1f ms)\n",
              static_cast<long long>(num_loaded_blocks), static_cast<long long>(num_rounds), loaded.host_load_ms_total,
              static_cast<double>(num_loaded_blocks) * copy_ms);
  ASSERT_EQ(loaded.host_num_loads, 1);
  EXPECT_GE(num_loaded_blocks, kPrefixTokens / kBlockTokens / 2) << "most of the prefix must come from the host";
  // A wait per batch of copies: a handful of rounds (the chats' decode-lane
  // steps among them), however many pages; a wait per page took one each.
  EXPECT_LE(num_rounds, 16);
  EXPECT_LT(loaded.host_load_ms_total, 1.25 * static_cast<double>(num_loaded_blocks) * copy_ms + 40.0)
      << "the load runs at about the link's rate (one decode-lane step of slack)";

  for (auto& [id, s] : streams) engine.abort(id);
  step_until([&] { return !engine.has_work(); });
  EXPECT_EQ(engine.stats().num_free_kv_blocks, engine.stats().num_kv_blocks);
}

}  // namespace
}  // namespace sluice
