#include "reference_renderer.h"

#include "../support/python_oracle.h"

namespace sluice::api::testing {

Result<std::vector<ReferenceResult>> render_with_python(const nlohmann::ordered_json& cases) {
  nlohmann::ordered_json job;
  job["cases"] = cases;
  SLUICE_TRY_ASSIGN(text, sluice::testing::run_python_oracle("tests/api/render_reference.py", "jinja2", job.dump()));
  const auto parsed = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_array() || parsed.size() != cases.size()) {
    return Error{"render_reference.py returned malformed output"};
  }
  std::vector<ReferenceResult> results;
  for (const auto& r : parsed) {
    ReferenceResult out;
    out.ok = r.at("ok").get<bool>();
    if (out.ok) {
      out.output = r.at("output").get<std::string>();
    } else {
      out.stage = r.at("stage").get<std::string>();
      out.error = r.at("error").get<std::string>();
    }
    results.push_back(std::move(out));
  }
  return results;
}

}  // namespace sluice::api::testing
