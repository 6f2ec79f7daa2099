// The JSON-prefix oracle for C++ tests: tests/support/json_prefix.py, with
// Python's json module as the judge, independent of src/sluice/structured.
// For each text (bytes, which may end inside a character): whether some bytes
// appended make it a JSON document, and whether it is one already.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "python_oracle.h"

namespace sluice::testing {

struct JsonPrefixVerdict {
  bool prefix = false;    // some bytes appended make a JSON document
  bool complete = false;  // a JSON document as it is
};

// One Python run for all the texts.
inline Result<std::vector<JsonPrefixVerdict>> json_prefix_verdicts(const std::vector<std::string>& texts) {
  nlohmann::json job = {{"texts", nlohmann::json::array()}};
  for (const std::string& text : texts) job["texts"].push_back(hex_bytes(text));
  SLUICE_TRY_ASSIGN(out, run_python_oracle("tests/support/json_prefix.py", "json", job.dump()));
  const auto parsed = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_array() || parsed.size() != texts.size())
    return Error{"json_prefix.py returned malformed output"};
  std::vector<JsonPrefixVerdict> verdicts;
  for (const auto& v : parsed) verdicts.push_back({v.at("prefix").get<bool>(), v.at("complete").get<bool>()});
  return verdicts;
}

}  // namespace sluice::testing
