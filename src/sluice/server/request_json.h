// parse_request_json: request bodies to nlohmann::ordered_json, fast on what
// dominates them (one long prompt string). nlohmann's lexer costs ~18 ns a
// byte of string, 6 ms for a 300k-token prompt, most of what the server adds
// to time-to-first-token; this reads the body with simdjson (Debian's
// libsimdjson, its On Demand API) and builds the value from that
// (docs/benchmarks.md has the measurements against nlohmann and against the
// hand-written parser it replaced).
//
// Same result as nlohmann::ordered_json::parse on every input (tested against
// it): the same values and number types (non-negative integers unsigned,
// overflowing integers as doubles, doubles out of range an error), the last
// of duplicate keys wins, invalid UTF-8 and lone surrogate escapes refused.
// One difference: nesting deeper than kMaxJsonDepth is an error. Errors say
// what is wrong and at which byte.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "sluice/common/result.h"

namespace sluice::server {

inline constexpr int kMaxJsonDepth = 256;

Result<nlohmann::ordered_json> parse_request_json(std::string_view text);

}  // namespace sluice::server
