// The run as a picture, written as plain SVG (no plotting dependency): top,
// each request's output tokens over time, one line per request, flat at zero
// from send to first token, so a decode stall is a flat segment; bottom, the
// decode tokens per second across all streams, so a second with no decode
// anywhere is a gap in the bars.
#pragma once

#include <string>
#include <vector>

#include "sluice/loadgen/metrics.h"
#include "sluice/loadgen/request_record.h"

namespace sluice::loadgen {

std::string render_svg_plot(const std::string& title, const std::vector<RequestRecord>& records,
                            const BenchSummary& summary);

}  // namespace sluice::loadgen
