// Metrics against values worked out by hand from small timelines.
#include "sluice/loadgen/metrics.h"

#include <gtest/gtest.h>

namespace sluice::loadgen {
namespace {

RequestRecord record(std::size_t index, RequestRole role, RequestStatus status, double send_ms,
                     std::vector<double> token_ms, double end_ms) {
  RequestRecord r{.index = index, .label = role == RequestRole::kForeground ? "fg" : "chat", .role = role};
  r.status = status;
  r.send_ms = send_ms;
  r.arrival_ms = send_ms;
  if (!token_ms.empty()) r.first_token_ms = token_ms.front();
  r.token_ms = std::move(token_ms);
  r.end_ms = end_ms;
  r.num_planned_prompt_tokens = 10;
  return r;
}

// A: foreground, tokens at 100, 150, 200 and (after an 1100 ms stall) 1300; usage says 4 tokens.
// B: foreground, sent at 500, tokens at 700 and 800.
// C: a background chat, tokens at 50, 1000, 1050, cancelled at 1100.
std::vector<RequestRecord> three_streams() {
  std::vector<RequestRecord> records;
  records.push_back(record(0, RequestRole::kForeground, RequestStatus::kCompleted, 0, {100, 150, 200, 1300}, 1300));
  records.back().num_usage_output_tokens = 4;
  records.back().num_prompt_tokens = 12;
  records.push_back(record(1, RequestRole::kForeground, RequestStatus::kCompleted, 500, {700, 800}, 800));
  records.push_back(record(2, RequestRole::kBackground, RequestStatus::kCancelled, 0, {50, 1000, 1050}, 1100));
  return records;
}

TEST(Percentile, LinearInterpolationLikeNumpy) {
  const std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(percentile(v, 0.5), 5.5);
  EXPECT_DOUBLE_EQ(percentile(v, 0.9), 9.1);
  EXPECT_DOUBLE_EQ(percentile(v, 0.99), 9.91);
  EXPECT_DOUBLE_EQ(percentile(v, 0.0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 1.0), 10);
  EXPECT_DOUBLE_EQ(percentile({42}, 0.99), 42);
}

TEST(Summarize, UnsortedInputAndEmpty) {
  const Distribution d = summarize({30, 10, 20});
  EXPECT_EQ(d.count, 3);
  EXPECT_DOUBLE_EQ(d.mean, 20);
  EXPECT_DOUBLE_EQ(d.p50, 20);
  EXPECT_DOUBLE_EQ(d.p90, 28);
  EXPECT_DOUBLE_EQ(d.max, 30);
  EXPECT_EQ(summarize({}).count, 0);
}

TEST(SummarizeRun, LatenciesOverCompletedForeground) {
  const BenchSummary s = summarize_run(three_streams(), {});
  EXPECT_EQ(s.num_requests, 3);
  EXPECT_EQ(s.num_foreground, 2);
  EXPECT_EQ(s.num_completed, 2);
  EXPECT_EQ(s.num_cancelled, 1);
  EXPECT_EQ(s.num_background_started, 1);
  // TTFT: A 100, B 200.  E2E: A 1300, B 300.  TPOT: A (1300-100)/3 = 400, B (800-700)/1 = 100.
  EXPECT_DOUBLE_EQ(s.ttft_ms.p50, 150);
  EXPECT_DOUBLE_EQ(s.ttft_ms.max, 200);
  EXPECT_DOUBLE_EQ(s.e2e_ms.mean, 800);
  EXPECT_DOUBLE_EQ(s.tpot_ms.max, 400);
  EXPECT_DOUBLE_EQ(s.tpot_ms.p50, 250);
  // Output tokens: A's usage 4, B 2 chunks, C 3 chunks.  Prompt: 12 (usage) + 10 + 10 (planned).
  EXPECT_EQ(s.num_output_tokens, 9);
  EXPECT_EQ(s.num_output_chunks, 9);
  EXPECT_EQ(s.num_prompt_tokens, 32);
  EXPECT_DOUBLE_EQ(s.duration_ms, 1300);
  EXPECT_DOUBLE_EQ(s.request_throughput_per_s, 2 / 1.3);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 9 / 1.3);
}

TEST(SummarizeRun, GapsAndStallsOverEveryStream) {
  const BenchSummary s = summarize_run(three_streams(), {});
  // Gaps: A 50, 50, 1100; B 100; C 950, 50.
  EXPECT_EQ(s.itl_ms.count, 6);
  EXPECT_DOUBLE_EQ(s.itl_ms.p50, 75);
  EXPECT_DOUBLE_EQ(s.itl_ms.max, 1100);
  EXPECT_DOUBLE_EQ(s.longest_decode_stall.gap_ms, 1100);
  EXPECT_EQ(s.longest_decode_stall.request_index, 0u);
  EXPECT_DOUBLE_EQ(s.longest_decode_stall.from_ms, 200);
  // Per-stream longest gaps 1100, 100, 950; rates 3/1.2 s, 1/0.1 s, 2/1.0 s.
  EXPECT_DOUBLE_EQ(s.max_itl_ms.p50, 950);
  EXPECT_DOUBLE_EQ(s.decode_tokens_per_s.p50, 2.5);
  EXPECT_DOUBLE_EQ(s.decode_tokens_per_s.max, 10);
  // Merged arrivals 50 100 150 200 700 800 1000 1050 1300: the longest gap with a
  // stream mid-decode is 200 -> 700 (A spans it).
  EXPECT_DOUBLE_EQ(s.longest_global_stall_ms, 500);
  // Decode tokens (all but each stream's first): 150 200 800 | 1000 1050 1300.
  EXPECT_EQ(s.decode_tokens_per_second, (std::vector<std::int64_t>{3, 3}));
  EXPECT_EQ(s.num_zero_decode_seconds, 0);
  EXPECT_DOUBLE_EQ(s.foreground_start_ms, 0);
  EXPECT_DOUBLE_EQ(s.foreground_end_ms, 1300);
  EXPECT_DOUBLE_EQ(s.decode_tokens_per_s_during_foreground, 6 / 1.3);
}

TEST(SummarizeRun, SecondsWithoutAnyDecodeAreCounted) {
  // One stream: first token at 0, next at 3500: seconds 0, 1 and 2 pass with it mid-decode and no token.
  std::vector<RequestRecord> records = {
      record(0, RequestRole::kForeground, RequestStatus::kCompleted, 0, {0, 3500, 3600}, 3600)};
  const BenchSummary s = summarize_run(records, {});
  EXPECT_EQ(s.decode_tokens_per_second, (std::vector<std::int64_t>{0, 0, 0, 2}));
  EXPECT_EQ(s.num_zero_decode_seconds, 3);
  EXPECT_DOUBLE_EQ(s.longest_global_stall_ms, 3500);
}

TEST(SummarizeRun, GoodputAgainstEachObjective) {
  const auto records = three_streams();
  EXPECT_EQ(summarize_run(records, {.ttft_ms = 150}).num_good, 1);   // A (100) yes, B (200) no
  EXPECT_EQ(summarize_run(records, {.tpot_ms = 100}).num_good, 1);   // B only
  EXPECT_EQ(summarize_run(records, {.itl_ms = 1000}).num_good, 1);   // A's 1100 ms gap fails
  EXPECT_EQ(summarize_run(records, {.e2e_ms = 1300}).num_good, 2);
  EXPECT_EQ(summarize_run(records, {.ttft_ms = 150, .tpot_ms = 100}).num_good, 0);
  const BenchSummary s = summarize_run(records, {.e2e_ms = 1300});
  EXPECT_TRUE(s.has_slo);
  EXPECT_DOUBLE_EQ(s.goodput_requests_per_s, 2 / 1.3);
  EXPECT_FALSE(summarize_run(records, {}).has_slo);
}

TEST(SummarizeRun, FailedAndUnsentRequestsAreCountedNotTimed) {
  std::vector<RequestRecord> records = three_streams();
  records.push_back(record(3, RequestRole::kForeground, RequestStatus::kFailed, 900, {}, 950));
  records.push_back(record(4, RequestRole::kForeground, RequestStatus::kNotSent, 0, {}, 0));
  const BenchSummary s = summarize_run(records, {});
  EXPECT_EQ(s.num_failed, 1);
  EXPECT_EQ(s.num_not_sent, 1);
  EXPECT_EQ(s.num_completed, 2);
  EXPECT_EQ(s.ttft_ms.count, 2);
  EXPECT_EQ(s.num_prompt_tokens, 42);  // the failed one was sent; the unsent one was not
}

}  // namespace
}  // namespace sluice::loadgen
