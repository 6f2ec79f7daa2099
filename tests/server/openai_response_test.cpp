// Response shapes as clients decode them, and the metrics page's format.
#include "sluice/server/openai_response.h"

#include <gtest/gtest.h>

#include "sluice/server/api_error.h"
#include "sluice/server/auth.h"
#include "sluice/server/metrics.h"
#include "sluice/server/server.h"

namespace sluice::server {
namespace {

using nlohmann::json;

TEST(Response, UsageAlwaysHasBothDetailObjects) {
  const json u = usage_json({.prompt_tokens = 10, .completion_tokens = 4, .cached_tokens = 8, .reasoning_tokens = 2});
  EXPECT_EQ(u["total_tokens"], 14);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(u["completion_tokens_details"]["reasoning_tokens"], 2);
  const json zero = usage_json({});
  EXPECT_TRUE(zero["prompt_tokens_details"].contains("cached_tokens"));
  EXPECT_TRUE(zero["completion_tokens_details"].contains("reasoning_tokens"));
}

TEST(Response, ChunkHasIntegerCreatedAndUsageKeyOnlyWhenAsked) {
  const ResponseHeader header{.id = "chatcmpl-1", .created_s = 1730000000, .model = "m"};
  const json chunk = chat_chunk(header, json::array(), false);
  EXPECT_TRUE(chunk["created"].is_number_integer());
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_FALSE(chunk.contains("usage"));
  const json with_usage = chat_chunk(header, json::array(), true);
  EXPECT_TRUE(with_usage["usage"].is_null());
  const std::string line = sse_event(chunk);
  EXPECT_EQ(line.rfind("data: {", 0), 0u);
  EXPECT_EQ(line.substr(line.size() - 2), "\n\n");
  EXPECT_NE(line.find("\"created\":1730000000,"), std::string::npos);  // not 1730000000.0
}

TEST(Response, ToolCallDeltaShape) {
  ParsedDelta first;
  first.tool_calls.push_back({.index = 0, .id = "call_0", .name = "f", .arguments = ""});
  const json d1 = chat_delta(first, true);
  EXPECT_EQ(d1["role"], "assistant");
  EXPECT_EQ(d1["tool_calls"][0]["index"], 0);
  EXPECT_EQ(d1["tool_calls"][0]["id"], "call_0");
  EXPECT_EQ(d1["tool_calls"][0]["type"], "function");
  EXPECT_EQ(d1["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(d1["tool_calls"][0]["function"]["arguments"], "");
  ParsedDelta later;
  later.tool_calls.push_back({.index = 0, .arguments = "{\"a\""});
  const json d2 = chat_delta(later, false);
  EXPECT_FALSE(d2.contains("role"));
  EXPECT_FALSE(d2["tool_calls"][0].contains("id"));
  EXPECT_FALSE(d2["tool_calls"][0]["function"].contains("name"));
  EXPECT_EQ(d2["tool_calls"][0]["function"]["arguments"], "{\"a\"");
}

TEST(Response, FirstDeltaCarriesRoleAndContent) {
  ParsedDelta d;
  d.content = "Hi";
  EXPECT_EQ(chat_delta(d, true), json({{"role", "assistant"}, {"content", "Hi"}}));
  ParsedDelta r;
  r.reasoning = "hmm";
  EXPECT_EQ(chat_delta(r, false), json({{"reasoning_content", "hmm"}}));
}

TEST(Response, MessageContentIsNullOnlyForPureToolCalls) {
  EXPECT_TRUE(chat_message("", "", {{"id", "f", "{}"}})["content"].is_null());
  EXPECT_EQ(chat_message("", "", {})["content"], "");
  EXPECT_EQ(chat_message("x", "r", {})["reasoning_content"], "r");
}

TEST(Response, ErrorEnvelope) {
  const json e = model_not_found("nope").to_json();
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  EXPECT_EQ(e["error"]["param"], "model");
  EXPECT_TRUE(e["error"].contains("message"));
  EXPECT_TRUE(e["error"].contains("type"));
  const json bad = bad_request("x").to_json();
  EXPECT_TRUE(bad["error"]["param"].is_null());
  EXPECT_TRUE(bad["error"]["code"].is_null());
  EXPECT_EQ(unauthorized().http_status, 401);
  EXPECT_EQ(overloaded("busy", 2).retry_after_s, 2);
}

TEST(Auth, ConstantTimeEquals) {
  EXPECT_TRUE(constant_time_equals("secret", "secret"));
  EXPECT_FALSE(constant_time_equals("secret", "secreT"));
  EXPECT_FALSE(constant_time_equals("secret", "secret2"));
  EXPECT_FALSE(constant_time_equals("secret", ""));
  EXPECT_FALSE(constant_time_equals("secret", "secre"));
  EXPECT_EQ(supplied_api_key("Bearer abc", ""), "abc");
  EXPECT_EQ(supplied_api_key("", "xyz"), "xyz");
  EXPECT_EQ(supplied_api_key("Basic abc", ""), "");
}

TEST(Metrics, HistogramIsCumulative) {
  Histogram h({1.0, 2.0});
  h.observe(0.5);
  h.observe(1.5);
  h.observe(5.0);
  std::string out;
  h.render(out, "x", "a=\"b\"");
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"2\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum{a=\"b\"} 7\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count{a=\"b\"} 3\n"), std::string::npos) << out;
}

TEST(Metrics, PageHasTheVllmNames) {
  ServerMetrics metrics;
  metrics.observe_time_to_first_token(0.02);
  metrics.observe_request_finished(RequestOutcome::kAbort, 0.5, 10, 3);
  EngineStats stats;
  stats.num_running = 2;
  stats.num_waiting = 1;
  stats.kv_usage = 0.25;
  stats.prefix_cache_queried_tokens = 100;
  stats.prefix_cache_hit_tokens = 40;
  stats.longest_current_decode_stall_ms = 120;
  const std::string page = metrics.render(stats, "m");
  for (const char* line :
       {"vllm:num_requests_running{model_name=\"m\"} 2\n", "vllm:num_requests_waiting{model_name=\"m\"} 1\n",
        "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n", "vllm:prefix_cache_queries_total{model_name=\"m\"} 100\n",
        "vllm:prefix_cache_hits_total{model_name=\"m\"} 40\n", "vllm:prompt_tokens_total{model_name=\"m\"} 10\n",
        "vllm:generation_tokens_total{model_name=\"m\"} 3\n",
        "vllm:request_success_total{model_name=\"m\",finished_reason=\"abort\"} 1\n",
        "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 1\n",
        "sluice:longest_current_decode_stall_seconds{model_name=\"m\"} 0.12\n",
        "# TYPE vllm:e2e_request_latency_seconds histogram\n", "# TYPE vllm:inter_token_latency_seconds histogram\n"})
    EXPECT_NE(page.find(line), std::string::npos) << line;
}

TEST(StatsLogLine, ThroughputAndRates) {
  EngineStats a, b;
  b.num_prompt_tokens_computed = 1000;
  b.num_generated_tokens = 50;
  b.num_running = 3;
  b.num_waiting = 4;
  b.kv_usage = 0.5;
  b.prefix_cache_queried_tokens = 200;
  b.prefix_cache_hit_tokens = 50;
  b.longest_current_decode_stall_ms = 12.5;
  const std::string line = stats_log_line(a, b, 2.0);
  EXPECT_EQ(line,
            "Avg prompt throughput: 500.0 tokens/s, Avg generation throughput: 25.0 tokens/s, Running: 3 reqs, "
            "Waiting: 4 reqs, KV cache usage: 50.0%, Prefix cache hit rate: 25.0%, Longest decode stall: 12.5 ms");
}

TEST(StatsLogLine, HostTierOverTheInterval) {
  EngineStats a, b;
  a.num_host_kv_blocks = b.num_host_kv_blocks = 1000;
  b.num_host_stored_kv_blocks = 250;
  a.host_cache_queried_tokens = 100;
  b.host_cache_queried_tokens = 500;
  b.host_cache_hit_tokens = 100;
  b.host_loaded_blocks = 7;
  b.host_loaded_bytes = 1'500'000'000;
  b.host_stored_blocks = 3;
  b.host_stored_bytes = 500'000'000;
  b.host_evicted_blocks = 2;
  b.host_num_loads = 2;
  b.host_load_ms_total = 30.0;
  const std::string line = stats_log_line(a, b, 1.0);
  const std::string tail = ", Host KV cache: 25.0% used, hit rate 25.0%, loaded 1.50 GB (7 blocks), stored 0.50 GB "
                           "(3 blocks), evicted 2 blocks, mean load 15.0 ms";
  ASSERT_GE(line.size(), tail.size());
  EXPECT_EQ(line.substr(line.size() - tail.size()), tail);
  EXPECT_EQ(line.find("swapped"), std::string::npos) << "no swaps in the interval, no swap field";
  a.num_swap_preemptions = 1;
  a.host_swapped_out_blocks = 10;
  b.num_swap_preemptions = 3;
  b.host_swapped_out_blocks = 50;
  const std::string swapped = stats_log_line(a, b, 1.0);
  const std::string swap_tail = "mean load 15.0 ms, 2 preemptions swapped out 40 blocks";
  ASSERT_GE(swapped.size(), swap_tail.size());
  EXPECT_EQ(swapped.substr(swapped.size() - swap_tail.size()), swap_tail);
  EngineStats none;
  EXPECT_EQ(stats_log_line(none, none, 1.0).find("Host KV"), std::string::npos) << "no tier, no host fields";
}

TEST(Metrics, HostTierSeriesOnlyWithAHostTier) {
  ServerMetrics metrics;
  EngineStats stats;
  stats.num_kv_blocks = 10;
  EXPECT_EQ(metrics.render(stats, "m").find("tier=\"host\""), std::string::npos);
  stats.num_host_kv_blocks = 40;
  stats.num_host_stored_kv_blocks = 12;
  stats.host_cache_queried_tokens = 640;
  stats.host_cache_hit_tokens = 320;
  stats.host_loaded_blocks = 20;
  stats.host_loaded_bytes = 20480;
  stats.host_swapped_out_blocks = 9;
  stats.num_swap_preemptions = 2;
  stats.host_hit_tokens_recomputed = 48;
  const std::string page = metrics.render(stats, "m");
  for (const std::string line :
       {"vllm:external_prefix_cache_queries_total{model_name=\"m\"} 640\n",
        "vllm:external_prefix_cache_hits_total{model_name=\"m\"} 320\n",
        "sluice:kv_cache_tier_hit_tokens_total{model_name=\"m\",tier=\"host\"} 320\n",
        "sluice:kv_cache_tier_capacity_blocks{model_name=\"m\",tier=\"host\"} 40\n",
        "sluice:kv_cache_tier_blocks{model_name=\"m\",tier=\"host\",state=\"cached\"} 12\n",
        "sluice:kv_host_loaded_blocks_total{model_name=\"m\"} 20\n",
        "sluice:kv_host_loaded_bytes_total{model_name=\"m\"} 20480\n",
        "sluice:kv_host_swapped_out_blocks_total{model_name=\"m\"} 9\n",
        "sluice:num_preemptions_swapped_total{model_name=\"m\"} 2\n",
        "sluice:kv_host_hit_tokens_recomputed_total{model_name=\"m\"} 48\n"})
    EXPECT_NE(page.find(line), std::string::npos) << line;
}

TEST(Metrics, LongStepsAreCounted) {
  ServerMetrics metrics;
  EngineStats stats;
  stats.num_long_steps = 54;
  EXPECT_NE(metrics.render(stats, "m").find("sluice:long_steps_total{model_name=\"m\"} 54\n"), std::string::npos);
}

}  // namespace
}  // namespace sluice::server
