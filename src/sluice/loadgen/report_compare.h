// Two JSON reports of the same workload side by side, metric by metric: for
// simulator calibration, the reference is the real server and the prediction
// the simulated one; error = (predicted - reference) / reference.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sluice/common/result.h"

namespace sluice::loadgen {

struct MetricComparison {
  std::string metric;  // a path in "summary", e.g. "ttft_ms.p50"
  double reference = 0;
  double predicted = 0;
  double relative_error = 0;  // NaN when the reference is 0
};

// The metrics compared, in table order.
const std::vector<std::string>& compared_metrics();

Result<std::vector<MetricComparison>> compare_reports(const nlohmann::json& reference, const nlohmann::json& predicted);

std::string comparison_table(const std::vector<MetricComparison>& rows);
nlohmann::json comparison_json(const std::vector<MetricComparison>& rows);

}  // namespace sluice::loadgen
