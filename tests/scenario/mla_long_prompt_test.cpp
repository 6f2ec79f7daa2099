// DeepSeek-V3 (MLA) on 8xH200 at TP 8, priced at sluice's measured V3 kernels
// (h200_sluice_cuda_deepseek_v3): a chunk over a long prefix pays the K/V
// decompression of the whole prefix, whatever its rows. A long prompt alone
// must still reach its first token near prefill-first's time (promise 2),
// while chats that decode beside one keep the inter-token target on average
// and no gap past the token-gap bound (promise 1).
#include <gtest/gtest.h>

#include <cstdio>

#include "../support/deepseek_v3_profile_shape.h"
#include "scenario_driver.h"

namespace sluice::scenario {
namespace {

constexpr std::int32_t kMaxModelLen = 131072;
constexpr double kInterTokenTargetMs = 50.0;

SimSetup deepseek_v3_8xh200() {
  const sim::ModelProfile profile = sim::make_deepseek_v3_profile(testing::deepseek_v3_shape(61, 3));
  const sim::HardwareSpec hardware = sim::h200_sluice_cuda_deepseek_v3();
  const sim::Parallelism parallelism{.num_gpus = 8, .tensor_parallel = 8};
  sim::SimBackendOptions options;
  options.max_model_len_tokens = kMaxModelLen;
  auto backend = sim::make_sim_backend(profile, hardware, parallelism, options);
  EXPECT_TRUE(backend.ok()) << backend.error_message();
  return SimSetup{.cost_model = std::make_shared<sim::RooflineCostModel>(profile, hardware, parallelism),
                  .backend = std::move(backend).value()};
}

sim::TimedRequest request(const std::string& id, double arrival_ms, std::int32_t prompt, std::int32_t output,
                          std::uint64_t seed) {
  sim::TimedRequest r{.arrival_ms = arrival_ms};
  r.request.request_id = id;
  r.request.prompt_token_ids = sim::synthetic_tokens(seed, prompt, kVocabSize);
  r.request.max_tokens = output;
  r.request.ignore_eos = true;
  return r;
}

sim::ReplayOutcome run(SchedulingPolicy policy, std::vector<sim::TimedRequest> workload,
                       double max_token_gap_ms = 0.0) {
  SimSetup setup = deepseek_v3_8xh200();
  EngineConfig c;
  c.max_token_gap_ms = max_token_gap_ms;
  c.scheduling = policy;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 8192;
  c.max_step_ms = kInterTokenTargetMs;
  c.max_model_len_tokens = kMaxModelLen;
  c.clock = ClockMode::kVirtual;
  Engine engine(std::move(setup.backend), setup.cost_model, c);
  return play(engine, std::move(workload));
}

TEST(MlaLongPrompt, AloneItsFirstTokenComesNearPrefillFirsts) {
  const auto workload = [] { return std::vector<sim::TimedRequest>{request("long", 0.0, 100000, 16, 1)}; };
  const sim::ReplayOutcome sluice = run(SchedulingPolicy::kSluice, workload());
  const sim::ReplayOutcome prefill_first = run(SchedulingPolicy::kPrefillFirst, workload());
  const double ttft = ttft_ms(sluice.timelines.at("long"));
  const double ttft_prefill_first = ttft_ms(prefill_first.timelines.at("long"));
  std::printf("[mla, alone] 100k prompt TTFT: sluice %.0f ms (max step %.0f ms, %lld steps), prefill-first %.0f ms\n",
              ttft, sluice.max_step_ms, static_cast<long long>(sluice.stats.num_steps), ttft_prefill_first);
  // Held to the 50 ms target alone, its chunks were mostly decompression: 191 s (session 30).
  EXPECT_LE(ttft, 1.5 * ttft_prefill_first);
  // No step past four times the target, even with nobody decoding.
  EXPECT_LE(sluice.max_step_ms, 4.0 * kInterTokenTargetMs + 1e-6);
}

struct BesideChats {
  double long_ttft_ms = 0.0;
  double chat_gap_ms = 0.0;          // the longest between two tokens of any chat
  double slowest_chat_tok_s = 1e9;   // tokens over the time from a chat's first to its last
  std::int64_t num_long_steps = 0;
};

BesideChats beside_chats(double max_token_gap_ms) {
  std::vector<sim::TimedRequest> workload = {request("long", 0.0, 100000, 16, 1)};
  for (int i = 0; i < 4; ++i) workload.push_back(request("chat-" + std::to_string(i), 5.0, 1000, 200, 10 + i));
  const sim::ReplayOutcome sluice = run(SchedulingPolicy::kSluice, std::move(workload), max_token_gap_ms);
  BesideChats out{.long_ttft_ms = ttft_ms(sluice.timelines.at("long")), .num_long_steps = sluice.stats.num_long_steps};
  for (const auto& [id, t] : sluice.timelines) {
    if (id == "long") continue;
    EXPECT_EQ(t.token_ms.size(), 200u) << id;
    out.chat_gap_ms = std::max(out.chat_gap_ms, sim::max_token_gap_ms(t));
    const double span_ms = t.token_ms.back() - t.token_ms.front();
    out.slowest_chat_tok_s = std::min(out.slowest_chat_tok_s, 1000.0 * (t.token_ms.size() - 1) / span_ms);
    // Every chat token comes while the long prompt prefills: the rates are its.
    EXPECT_LT(t.token_ms.back(), out.long_ttft_ms) << id;
  }
  std::printf("[mla, beside chats, token gap bound %.0f ms] 100k prompt TTFT %.0f ms (%lld long steps); chats: "
              "longest gap %.1f ms, slowest %.1f tok/s\n",
              max_token_gap_ms > 0.0 ? max_token_gap_ms : 3.0 * kInterTokenTargetMs, out.long_ttft_ms,
              static_cast<long long>(out.num_long_steps), out.chat_gap_ms, out.slowest_chat_tok_s);
  return out;
}

TEST(MlaLongPrompt, ChatsDecodingBesideItKeepTheTarget) {
  // With no long steps (the bound at the target) a step with a decode in it
  // stays under the target, so each chunk pays the decompression of the
  // whole prefix for a few rows: 17.4 s (session 30).
  const BesideChats capped = beside_chats(kInterTokenTargetMs);
  EXPECT_LE(capped.chat_gap_ms, kInterTokenTargetMs + 1e-6);
  EXPECT_EQ(capped.num_long_steps, 0);
  // The default bound, 3x the target: one long step amortizes the
  // decompression over many rows, the steps after it run the decodes alone
  // until the chats are back on pace: 11.6 s, the chats at 24 tok/s.
  const BesideChats paced = beside_chats(0.0);
  EXPECT_LE(paced.chat_gap_ms, 3.0 * kInterTokenTargetMs + 1e-6);
  EXPECT_GE(paced.slowest_chat_tok_s, 1000.0 / kInterTokenTargetMs);
  EXPECT_LT(paced.long_ttft_ms, 0.75 * capped.long_ttft_ms);
  EXPECT_GT(paced.num_long_steps, 10);
}

}  // namespace
}  // namespace sluice::scenario
