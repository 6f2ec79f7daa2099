// Reports: the comparison's errors by hand, the JSON's shape, the SVG's lines.
#include <algorithm>
#include <cmath>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "sluice/loadgen/metrics.h"
#include "sluice/loadgen/report.h"
#include "sluice/loadgen/report_compare.h"
#include "sluice/loadgen/svg_plot.h"

namespace sluice::loadgen {
namespace {

nlohmann::json report_with(double ttft_p50, double stall_ms) {
  BenchSummary s;
  s.ttft_ms.p50 = ttft_p50;
  s.longest_decode_stall.gap_ms = stall_ms;
  s.duration_ms = 1000;
  return {{"summary", summary_json(s, {})}};
}

TEST(ReportCompare, RelativeErrorPerMetric) {
  auto rows = compare_reports(report_with(200, 50), report_with(150, 75));
  ASSERT_TRUE(rows.ok()) << rows.error_message();
  ASSERT_EQ(rows->size(), compared_metrics().size());
  auto find = [&](const std::string& metric) {
    return *std::find_if(rows->begin(), rows->end(), [&](const auto& r) { return r.metric == metric; });
  };
  EXPECT_DOUBLE_EQ(find("ttft_ms.p50").relative_error, -0.25);  // (150 - 200) / 200
  EXPECT_DOUBLE_EQ(find("longest_decode_stall_ms").relative_error, 0.5);
  EXPECT_DOUBLE_EQ(find("duration_ms").relative_error, 0.0);
  EXPECT_TRUE(std::isnan(find("ttft_ms.p99").relative_error));  // reference 0
  const std::string table = comparison_table(*rows);
  EXPECT_NE(table.find("-25.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("+50.0%"), std::string::npos) << table;
  EXPECT_TRUE(comparison_json(*rows)["ttft_ms.p99"]["relative_error"].is_null());
  EXPECT_FALSE(compare_reports(nlohmann::json::object(), report_with(1, 1)).ok());
}

std::vector<RequestRecord> two_requests() {
  RequestRecord a{.index = 0, .label = "burst"};
  a.status = RequestStatus::kCompleted;
  a.token_ms = {100, 200, 900};
  a.first_token_ms = 100;
  a.end_ms = 900;
  RequestRecord b{.index = 1, .label = "chat", .role = RequestRole::kBackground};
  b.status = RequestStatus::kCancelled;
  b.token_ms = {10, 20};
  b.first_token_ms = 10;
  b.end_ms = 950;
  RequestRecord c{.index = 2, .label = "never"};  // not sent: not drawn
  return {a, b, c};
}

TEST(SvgPlot, OneLinePerSentRequestAndStallsAreFlat) {
  const auto records = two_requests();
  const BenchSummary summary = summarize_run(records, {});
  const std::string svg = render_svg_plot("a <title> & more", records, summary);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("a &lt;title&gt; &amp; more"), std::string::npos);
  std::size_t lines = 0;
  for (std::size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 2u);
  // Request 0's 700 ms gap (above the 50 ms step threshold) is drawn flat: two
  // consecutive points at the same height, 2 tokens.
  const std::regex first_line("<polyline[^>]*points=\"([^\"]*)\"");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(svg, match, first_line));
  std::vector<std::pair<double, double>> points;
  std::istringstream in(match[1].str());
  std::string point;
  while (in >> point) {
    const auto comma = point.find(',');
    points.emplace_back(std::stod(point.substr(0, comma)), std::stod(point.substr(comma + 1)));
  }
  bool flat_then_up = false;
  for (std::size_t i = 1; i + 1 < points.size(); ++i)
    flat_then_up = flat_then_up || (points[i].second == points[i - 1].second && points[i].first > points[i - 1].first &&
                                    points[i + 1].first == points[i].first && points[i + 1].second < points[i].second);
  EXPECT_TRUE(flat_then_up) << match[1].str();
  // One bar per second of the run.
  EXPECT_EQ(summary.decode_tokens_per_second.size(), 1u);
}

TEST(ReportJson, RecordsCarryStatusAndOptionalTokenTimes) {
  const auto records = two_requests();
  const auto with = records_json(records, true);
  const auto without = records_json(records, false);
  ASSERT_EQ(with.size(), 3u);
  EXPECT_EQ(with[0]["status"], "completed");
  EXPECT_EQ(with[1]["role"], "background");
  EXPECT_EQ(with[2]["status"], "not_sent");
  EXPECT_EQ(with[0]["token_ms"].size(), 3u);
  EXPECT_EQ(with[0]["num_output_tokens"], 3);
  EXPECT_FALSE(without[0].contains("token_ms"));
  const auto summary = summary_json(summarize_run(records, {.ttft_ms = 500}), {.ttft_ms = 500});
  EXPECT_EQ(summary["num_good"], 1);
  EXPECT_EQ(summary["slo"]["ttft_ms"], 500.0);
  EXPECT_EQ(summary["ttft_ms"]["count"], 1);
}

}  // namespace
}  // namespace sluice::loadgen
