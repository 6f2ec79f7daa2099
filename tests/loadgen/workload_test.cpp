// Workloads: lengths, arrival times, reproducibility and real prefix sharing.
#include "sluice/loadgen/workload.h"

#include <algorithm>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sluice/loadgen/prompt_source.h"
#include "sluice/loadgen/server_target.h"

namespace sluice::loadgen {
namespace {

const TokenSpace kTokens{.min_token_id = 100, .max_token_id = 200, .seed = 7};

std::vector<std::int32_t> ids(const PlannedRequest& r) { return prompt_token_ids(r.prompt, kTokens); }

std::size_t common_prefix(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b) {
  return static_cast<std::size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

TEST(PromptSource, TokenIdsHaveTheCountAndRangeAndAreReproducible) {
  const PromptSpec prompt{.segments = {{.key = 1, .num_tokens = 300}, {.key = 2, .num_tokens = 5}}};
  const auto a = prompt_token_ids(prompt, kTokens);
  ASSERT_EQ(a.size(), 305u);
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](std::int32_t id) { return id >= 100 && id < 200; }));
  EXPECT_EQ(a, prompt_token_ids(prompt, kTokens));
  EXPECT_NE(a, prompt_token_ids(prompt, {.min_token_id = 100, .max_token_id = 200, .seed = 8}));
  // Distinct ids are spread over the range, not stuck on a few.
  std::vector<std::int32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_GT(std::unique(sorted.begin(), sorted.end()) - sorted.begin(), 80);
}

TEST(PromptSource, TextHasOneWordPerToken) {
  const PromptSpec prompt{.segments = {{.key = 3, .num_tokens = 50}}};
  const std::string text = prompt_text(prompt, kTokens);
  EXPECT_EQ(std::count(text.begin(), text.end(), ' '), 49);
  EXPECT_EQ(prompt_text(PromptSpec{.literal_text = "as given"}, kTokens), "as given");
}

TEST(RandomWorkload, FixedLengthsAndPoissonArrivals) {
  const Workload all_at_once = make_random_workload({.num_prompts = 5, .input_tokens = 64, .output_tokens = 9});
  ASSERT_EQ(all_at_once.requests.size(), 5u);
  for (const auto& r : all_at_once.requests) {
    EXPECT_EQ(r.arrival_ms, 0);
    EXPECT_EQ(r.prompt.num_planned_tokens(), 64);
    EXPECT_EQ(r.max_output_tokens, 9);
  }
  EXPECT_NE(ids(all_at_once.requests[0]), ids(all_at_once.requests[1]));

  const Workload paced = make_random_workload({.num_prompts = 2000, .request_rate_per_s = 10, .seed = 3});
  EXPECT_TRUE(std::is_sorted(paced.requests.begin(), paced.requests.end(),
                             [](const auto& a, const auto& b) { return a.arrival_ms < b.arrival_ms; }));
  // 1999 exponential gaps of mean 100 ms: the mean is within 10% (sd of the mean ~ 2.2%).
  const double mean_gap_ms = paced.requests.back().arrival_ms / 1999.0;
  EXPECT_NEAR(mean_gap_ms, 100.0, 10.0);
  EXPECT_EQ(make_random_workload({.num_prompts = 20, .request_rate_per_s = 10, .seed = 3}).requests[7].arrival_ms,
            paced.requests[7].arrival_ms);
}

TEST(BurstWorkload, LengthsAndArrivalsInRangeWithBackgroundChats) {
  const BurstWorkloadOptions o{.num_prompts = 50, .min_input_tokens = 1000, .max_input_tokens = 2000,
                               .output_tokens = 16, .start_ms = 300, .window_ms = 500, .num_chats = 3,
                               .chat_input_tokens = 32, .chat_output_tokens = 64, .seed = 11};
  const Workload w = make_burst_workload(o);
  ASSERT_EQ(w.requests.size(), 50u);
  std::int64_t shortest = 1 << 30, longest = 0;
  for (const auto& r : w.requests) {
    EXPECT_EQ(r.role, RequestRole::kForeground);
    EXPECT_GE(r.arrival_ms, 300);
    EXPECT_LE(r.arrival_ms, 800);
    shortest = std::min(shortest, r.prompt.num_planned_tokens());
    longest = std::max(longest, r.prompt.num_planned_tokens());
  }
  EXPECT_GE(shortest, 1000);
  EXPECT_LE(longest, 2000);
  EXPECT_LT(shortest, 1200);  // 50 uniform draws cover the range
  EXPECT_GT(longest, 1800);
  EXPECT_EQ(w.background.num_streams, 3);
  const PlannedRequest chat0 = w.background.nth(0), chat1 = w.background.nth(1);
  EXPECT_EQ(chat0.role, RequestRole::kBackground);
  EXPECT_EQ(chat0.prompt.num_planned_tokens(), 32);
  EXPECT_EQ(chat0.max_output_tokens, 64);
  EXPECT_NE(ids(chat0), ids(chat1));
}

TEST(SessionsWorkload, EachTurnExtendsTheLastAndAllShareTheSystemPrompt) {
  const Workload w = make_sessions_workload({.num_sessions = 2, .num_turns = 3, .system_tokens = 40,
                                             .turn_input_tokens = 8, .output_tokens = 5, .think_ms = 250});
  ASSERT_EQ(w.requests.size(), 6u);
  // Session 0: turns 0, 1, 2 at indexes 0, 1, 2.
  EXPECT_FALSE(w.requests[0].follows);
  EXPECT_EQ(w.requests[1].follows, 0u);
  EXPECT_EQ(w.requests[2].follows, 1u);
  EXPECT_EQ(w.requests[1].arrival_ms, 250);
  EXPECT_EQ(w.requests[0].prompt.num_planned_tokens(), 48);
  EXPECT_EQ(w.requests[1].prompt.num_planned_tokens(), 48 + 5 + 8);
  EXPECT_EQ(w.requests[2].prompt.num_planned_tokens(), 48 + 2 * (5 + 8));
  EXPECT_EQ(common_prefix(ids(w.requests[0]), ids(w.requests[1])), 48u);
  EXPECT_EQ(common_prefix(ids(w.requests[1]), ids(w.requests[2])), 61u);
  // Across sessions only the system prompt is shared (by chance a token more, rarely).
  const std::size_t shared = common_prefix(ids(w.requests[0]), ids(w.requests[3]));
  EXPECT_GE(shared, 40u);
  EXPECT_LT(shared, 43u);
}

TEST(SessionsWorkload, OwnPrefixesAreSharedWithinASessionOnlyAndChatsRunBehind) {
  const Workload w = make_sessions_workload({.num_sessions = 2, .num_turns = 2, .system_tokens = 16,
                                             .session_prefix_tokens = 100, .turn_input_tokens = 8,
                                             .output_tokens = 5, .num_chats = 3, .chat_input_tokens = 12,
                                             .chat_output_tokens = 40});
  ASSERT_EQ(w.requests.size(), 4u);
  EXPECT_EQ(w.requests[0].prompt.num_planned_tokens(), 16 + 100 + 8);
  EXPECT_EQ(w.requests[1].prompt.num_planned_tokens(), 16 + 100 + 8 + 5 + 8);
  EXPECT_EQ(common_prefix(ids(w.requests[0]), ids(w.requests[1])), 124u) << "a turn re-sends its session's prefix";
  const std::size_t shared = common_prefix(ids(w.requests[0]), ids(w.requests[2]));
  EXPECT_GE(shared, 16u);
  EXPECT_LT(shared, 19u) << "another session shares the system prompt, not the prefix";
  EXPECT_EQ(w.background.num_streams, 3);
  const PlannedRequest chat = w.background.nth(0);
  EXPECT_EQ(chat.role, RequestRole::kBackground);
  EXPECT_EQ(chat.prompt.num_planned_tokens(), 12);
  EXPECT_EQ(chat.max_output_tokens, 40);
}

TEST(TraceWorkload, MooncakeHashIdsBecomeSharedBlocks) {
  const std::string trace =
      R"({"timestamp": 0, "input_length": 1100, "output_length": 7, "hash_ids": [0, 1, 2]})" "\n"
      R"({"timestamp": 2000, "input_length": 1300, "output_length": 9, "hash_ids": [0, 1, 3]})" "\n"
      "\n"
      R"({"timestamp": 1000, "input_length": 20, "output_length": 3, "hash_ids": [4]})" "\n";
  auto parsed = parse_trace_workload(trace, "t.jsonl", {.time_scale = 0.5, .block_tokens = 512});
  ASSERT_TRUE(parsed.ok()) << parsed.error_message();
  const Workload& w = *parsed;
  ASSERT_EQ(w.requests.size(), 3u);
  // Sorted by arrival, scaled by 0.5.
  EXPECT_EQ(w.requests[0].arrival_ms, 0);
  EXPECT_EQ(w.requests[1].arrival_ms, 500);
  EXPECT_EQ(w.requests[2].arrival_ms, 1000);
  const PlannedRequest &a = w.requests[0], &b = w.requests[2], &small = w.requests[1];
  EXPECT_EQ(a.prompt.num_planned_tokens(), 1100);
  EXPECT_EQ(b.prompt.num_planned_tokens(), 1300);
  EXPECT_EQ(small.prompt.num_planned_tokens(), 20);
  EXPECT_EQ(a.max_output_tokens, 7);
  // Blocks 0 and 1 are shared: 1024 tokens; block 2 vs 3 differ.
  const auto ia = ids(a), ib = ids(b);
  const std::size_t shared = common_prefix(ia, ib);
  EXPECT_GE(shared, 1024u);
  EXPECT_LT(shared, 1027u);
  // Block 4's first 20 tokens, the same wherever block 4 appears.
  auto again = parse_trace_workload(R"({"input_length": 600, "output_length": 1, "hash_ids": [4, 9]})", "u", {});
  ASSERT_TRUE(again.ok());
  const auto longer = ids(again->requests[0]);
  const auto shorter = ids(small);
  EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), longer.begin()));

  auto first_two = parse_trace_workload(trace, "t", {.max_requests = 2});
  ASSERT_TRUE(first_two.ok());
  EXPECT_EQ(first_two->requests.size(), 2u);
}

TEST(TraceWorkload, TextPromptsAndBadLines) {
  auto parsed = parse_trace_workload(R"({"arrival_ms": 5, "prompt": "hello there", "max_tokens": 4})", "t", {});
  ASSERT_TRUE(parsed.ok()) << parsed.error_message();
  EXPECT_EQ(parsed->requests[0].prompt.literal_text, "hello there");
  EXPECT_EQ(parsed->requests[0].arrival_ms, 5);
  EXPECT_FALSE(parse_trace_workload("{oops", "t", {}).ok());
  EXPECT_FALSE(parse_trace_workload(R"({"input_length": 10})", "t", {}).ok());
  EXPECT_FALSE(parse_trace_workload(R"({"output_length": 10})", "t", {}).ok());
  EXPECT_FALSE(parse_trace_workload(R"({"timestamp": -1, "input_length": 1, "output_length": 1})", "t", {}).ok());
  EXPECT_FALSE(parse_trace_workload("\n\n", "t", {}).ok());
  const auto error = parse_trace_workload("{}\n{oops", "trace.jsonl", {});
  EXPECT_NE(error.error_message().find("trace.jsonl:1"), std::string::npos) << error.error_message();
}

TEST(ServerTarget, BaseUrlsAndRequestBodies) {
  auto target = parse_base_url("http://localhost:8123/v1/");
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(target->host, "localhost");
  EXPECT_EQ(target->port, "8123");
  EXPECT_EQ(target->request_path(), "/v1/completions");
  auto prefixed = parse_base_url("http://10.0.0.1/gateway");
  ASSERT_TRUE(prefixed.ok());
  EXPECT_EQ(prefixed->port, "80");
  EXPECT_EQ(prefixed->path("/health"), "/gateway/health");
  EXPECT_FALSE(parse_base_url("https://x:1").ok());
  EXPECT_FALSE(parse_base_url("x:1").ok());
  EXPECT_FALSE(parse_base_url("http://x:port").ok());

  ServerTarget t = *target;
  t.model = "m";
  const PlannedRequest request{.prompt = {.segments = {{.key = 1, .num_tokens = 3}}}, .max_output_tokens = 4};
  auto body = nlohmann::json::parse(request_body(t, request, kTokens));
  EXPECT_EQ(body["prompt"].size(), 3u);
  EXPECT_TRUE(body["prompt"][0].is_number_integer());
  EXPECT_EQ(body["max_tokens"], 4);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  t.prompt_format = PromptFormat::kText;
  EXPECT_TRUE(nlohmann::json::parse(request_body(t, request, kTokens))["prompt"].is_string());
  t.endpoint = Endpoint::kChat;
  t.ignore_eos = false;
  body = nlohmann::json::parse(request_body(t, request, kTokens));
  EXPECT_EQ(t.request_path(), "/v1/chat/completions");
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_FALSE(body.contains("ignore_eos"));
}

}  // namespace
}  // namespace sluice::loadgen
