// Runs tests/api/render_reference.py (Debian's python3-jinja2 configured like
// Hugging Face's apply_chat_template) on a batch of cases, so each test binary
// pays for one Python start-up.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sluice/common/result.h"

namespace sluice::api::testing {

struct ReferenceResult {
  bool ok = false;
  std::string output;  // when ok
  std::string stage;   // "parse" or "render" when !ok
  std::string error;
};

// `cases` as render_reference.py documents them. Fails when /usr/bin/python3 or its
// jinja2 module is missing: the oracle is required, never skipped.
Result<std::vector<ReferenceResult>> render_with_python(const nlohmann::ordered_json& cases);

}  // namespace sluice::api::testing
