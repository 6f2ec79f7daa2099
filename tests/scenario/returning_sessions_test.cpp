// Sessions whose prefixes overflow the device KV but fit in the host tier
// (issue 17's H200 workload, run S7-5, scaled down): each session's first
// turn computes a long prefix, and after every first turn is done each
// session returns with the same prefix. Its prefix must then come from a
// tier, never be recomputed:
//   - a returning turn's load takes all its device blocks at once, more than
//     demotion keeps free; allocating them directly evicted other sessions'
//     cached prefixes before they reached the host (3 of 12 returning turns
//     recomputed in S7-5). The load now waits for demotion to make the room.
//   - when only the two tiers together hold every prefix, the host must not
//     evict a prefix that is about to return while it holds copies of
//     prefixes the device caches too (those are evicted first).
// Oracle: a returning turn's cached tokens cover its whole prefix.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "scenario_driver.h"

namespace sluice::scenario {
namespace {

constexpr std::int32_t kMaxModelLen = 1 << 16;
constexpr std::int32_t kBlockTokens = 16;
constexpr std::int32_t kSessions = 8;
constexpr std::int32_t kPrefixTokens = 32 * 1024;  // 2,048 blocks: more than demotion keeps free (1,152)
constexpr std::int32_t kTurnTokens = 64;
constexpr std::int32_t kDeviceBlocks = 4000;  // under two prefixes
constexpr double kTurnSpacingMs = 4000.0;     // a 32k prefill takes well under this

std::vector<TokenId> prompt_of(std::int32_t session, std::int32_t turn) {
  std::vector<TokenId> tokens = sim::synthetic_tokens(1000 + static_cast<std::uint64_t>(session), kPrefixTokens, kVocabSize);
  const std::vector<TokenId> message =
      sim::synthetic_tokens(5000 + static_cast<std::uint64_t>(2 * session + turn), kTurnTokens, kVocabSize);
  tokens.insert(tokens.end(), message.begin(), message.end());
  return tokens;
}

std::string name_of(std::int32_t session, std::int32_t turn) {
  char name[24];
  std::snprintf(name, sizeof(name), "s%d-t%d", session, turn);
  return name;
}

// Every first turn, then every returning turn, one session at a time.
std::vector<sim::TimedRequest> sessions_workload() {
  std::vector<sim::TimedRequest> out;
  for (std::int32_t turn = 0; turn < 2; ++turn) {
    for (std::int32_t s = 0; s < kSessions; ++s) {
      sim::TimedRequest r{.arrival_ms = kTurnSpacingMs * (turn * kSessions + s)};
      r.request.request_id = name_of(s, turn);
      r.request.prompt_token_ids = prompt_of(s, turn);
      r.request.max_tokens = 8;
      r.request.ignore_eos = true;
      out.push_back(std::move(r));
    }
  }
  return out;
}

sim::ReplayOutcome run_sessions(std::int32_t num_host_blocks) {
  SimSetup setup = deepseek_8xh200(kMaxModelLen, kDeviceBlocks);
  EngineConfig config;
  config.max_step_ms = 50.0;
  config.max_model_len_tokens = kMaxModelLen;
  config.clock = ClockMode::kVirtual;
  config.kv_offloading_bytes = static_cast<std::int64_t>(num_host_blocks) * setup.backend->info().kv_bytes_per_block;
  Engine engine(std::move(setup.backend), setup.cost_model, config);
  return play(engine, sessions_workload());
}

void expect_every_return_hits_its_prefix(const sim::ReplayOutcome& run) {
  EXPECT_EQ(run.num_rejected(), 0);
  ASSERT_EQ(run.timelines.size(), static_cast<std::size_t>(2 * kSessions));
  for (std::int32_t s = 0; s < kSessions; ++s) {
    const RequestTimeline& t = run.timelines.at(name_of(s, 1));
    EXPECT_EQ(t.finish_reason, FinishReason::kLength) << t.request_id;
    EXPECT_GE(t.num_cached_tokens, kPrefixTokens) << t.request_id << " recomputed part of its prefix";
  }
  EXPECT_GE(run.stats.host_cache_hit_tokens, static_cast<std::int64_t>(kSessions - 2) * kPrefixTokens)
      << "most returning prefixes come from the host (the last ones may still be on the device)";
  EXPECT_EQ(run.stats.host_failed_copies, 0);
  EXPECT_EQ(run.stats.num_free_kv_blocks, run.stats.num_kv_blocks) << "blocks leaked";
  EXPECT_EQ(run.stats.num_kv_copies_in_flight, 0);
}

std::int32_t all_prompt_blocks() { return kSessions * (kPrefixTokens + kTurnTokens) / kBlockTokens; }

TEST(ReturningSessions, LoadsWaitForDemotionInsteadOfEvictingPrefixesTheHostNeverSaw) {
  // The host holds every session's blocks with room to spare: only the
  // device side can lose a prefix.
  const sim::ReplayOutcome run = run_sessions(all_prompt_blocks() * 3 / 2);
  std::printf("[returning sessions, roomy host] %lld tokens loaded, %lld device keys evicted unstored, %lld host "
              "evictions\n",
              static_cast<long long>(run.stats.host_cache_hit_tokens),
              static_cast<long long>(run.stats.host_demotions_skipped),
              static_cast<long long>(run.stats.host_evicted_blocks));
  expect_every_return_hits_its_prefix(run);
  EXPECT_EQ(run.stats.host_demotions_skipped, 0) << "a cached key left the device without reaching the host";
  EXPECT_EQ(run.stats.host_evicted_blocks, 0);
}

TEST(ReturningSessions, HostEvictsCopiesTheDeviceHoldsBeforeAPrefixAboutToReturn) {
  // The host alone is 256 blocks short of every session's blocks; with the
  // device's 4,000 the two tiers hold them all only if they hold distinct keys.
  const sim::ReplayOutcome run = run_sessions(all_prompt_blocks() - 256);
  std::printf("[returning sessions, host short of the working set] %lld tokens loaded, %lld host evictions\n",
              static_cast<long long>(run.stats.host_cache_hit_tokens),
              static_cast<long long>(run.stats.host_evicted_blocks));
  expect_every_return_hits_its_prefix(run);
  EXPECT_GT(run.stats.host_evicted_blocks, 0) << "the host must have overflowed for this to test anything";
}

}  // namespace
}  // namespace sluice::scenario
