#include "reference_renderer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "sluice/common/io.h"

namespace sluice::api::testing {

Result<std::vector<ReferenceResult>> render_with_python(const nlohmann::ordered_json& cases) {
  const std::string python = "/usr/bin/python3";
  const std::string script = std::string(SLUICE_SOURCE_DIR) + "/tests/api/render_reference.py";
  if (std::system((python + " -c 'import jinja2' 2>/dev/null").c_str()) != 0) {
    return Error{"the reference renderer needs Debian's python3-jinja2 at " + python};
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string stem = "sluice_jinja_ref_" + std::to_string(::getpid());
  const std::string in_path = (dir / (stem + ".in.json")).string();
  const std::string out_path = (dir / (stem + ".out.json")).string();
  nlohmann::ordered_json job;
  job["cases"] = cases;
  SLUICE_TRY(write_file(in_path, job.dump()));
  const std::string command = python + " " + script + " < " + in_path + " > " + out_path;
  const int rc = std::system(command.c_str());
  Result<std::string> text = read_file(out_path);
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
  if (rc != 0 || !text.ok()) {
    return Error{"render_reference.py failed (exit status " + std::to_string(rc) + ")"};
  }
  const auto parsed = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
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
