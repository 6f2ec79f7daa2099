// The benchmark's outputs: the table on stdout and the JSON report (the
// summary, plus every request's timeline so plots and comparisons can be
// redone from the file alone).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sluice/loadgen/metrics.h"
#include "sluice/loadgen/request_record.h"

namespace sluice::loadgen {

nlohmann::json summary_json(const BenchSummary& summary, const Slo& slo);
// Token times are kept when `with_token_times` (they dominate the file's size).
nlohmann::json records_json(const std::vector<RequestRecord>& records, bool with_token_times);

std::string summary_table(const std::string& title, const BenchSummary& summary, const Slo& slo);

}  // namespace sluice::loadgen
