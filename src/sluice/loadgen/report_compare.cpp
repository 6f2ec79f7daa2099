#include "sluice/loadgen/report_compare.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <fmt/format.h>

namespace sluice::loadgen {
namespace {

Result<double> metric_value(const nlohmann::json& report, const std::string& path, const char* which) {
  if (!report.is_object() || !report.contains("summary")) return Error{std::string(which) + " report has no summary"};
  const nlohmann::json* node = &report["summary"];
  std::istringstream parts(path);
  std::string part;
  while (std::getline(parts, part, '.')) {
    if (!node->is_object() || !node->contains(part)) return Error{std::string(which) + " report lacks " + path};
    node = &(*node)[part];
  }
  if (!node->is_number()) return Error{std::string(which) + " report: " + path + " is not a number"};
  return node->get<double>();
}

}  // namespace

const std::vector<std::string>& compared_metrics() {
  static const std::vector<std::string> metrics = {
      "ttft_ms.p50",    "ttft_ms.p90",  "ttft_ms.p99",
      "ttft_ms.max",    "tpot_ms.p50",  "itl_ms.p50",
      "itl_ms.p99",     "e2e_ms.p50",   "e2e_ms.p99",
      "longest_decode_stall_ms", "longest_global_stall_ms", "decode_tokens_per_s_during_foreground",
      "output_tokens_per_s", "duration_ms"};
  return metrics;
}

Result<std::vector<MetricComparison>> compare_reports(const nlohmann::json& reference, const nlohmann::json& predicted) {
  std::vector<MetricComparison> rows;
  for (const std::string& metric : compared_metrics()) {
    SLUICE_TRY_ASSIGN(ref, metric_value(reference, metric, "reference"));
    SLUICE_TRY_ASSIGN(pred, metric_value(predicted, metric, "predicted"));
    rows.push_back({.metric = metric,
                    .reference = ref,
                    .predicted = pred,
                    .relative_error = ref != 0 ? (pred - ref) / ref : std::numeric_limits<double>::quiet_NaN()});
  }
  return rows;
}

std::string comparison_table(const std::vector<MetricComparison>& rows) {
  std::string out = fmt::format("| {:<38} | {:>12} | {:>12} | {:>8} |\n", "metric", "reference", "predicted", "error");
  out += fmt::format("|{:-<40}|{:->14}|{:->14}|{:->10}|\n", "", "", "", "");
  for (const MetricComparison& r : rows)
    out += fmt::format("| {:<38} | {:>12.1f} | {:>12.1f} | {:>8} |\n", r.metric, r.reference, r.predicted,
                       std::isnan(r.relative_error) ? std::string("n/a")
                                                    : fmt::format("{:+.1f}%", r.relative_error * 100.0));
  return out;
}

nlohmann::json comparison_json(const std::vector<MetricComparison>& rows) {
  nlohmann::json j = nlohmann::json::object();
  for (const MetricComparison& r : rows)
    j[r.metric] = {{"reference", r.reference},
                   {"predicted", r.predicted},
                   {"relative_error", std::isnan(r.relative_error) ? nlohmann::json(nullptr)
                                                                   : nlohmann::json(r.relative_error)}};
  return j;
}

}  // namespace sluice::loadgen
