// Runs a Python script that serves as a test oracle (Debian's /usr/bin/python3
// and the Debian module it imports): the job's JSON text on its stdin, its
// answer read from its stdout. One run per batch of cases, so a test binary
// pays for one Python start-up. A missing interpreter or module is an error:
// the oracle is required, never skipped.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "sluice/common/io.h"
#include "sluice/common/result.h"

namespace sluice::testing {

// Bytes as hex, for texts that need not be UTF-8 (mutations, cut characters).
inline std::string hex_bytes(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    out += kDigits[static_cast<std::uint8_t>(c) >> 4];
    out += kDigits[static_cast<std::uint8_t>(c) & 15];
  }
  return out;
}

// `script`: relative to the source tree. `module`: what it imports that
// Debian packages (checked first, so the error names the package's module).
inline Result<std::string> run_python_oracle(const std::string& script, const std::string& module,
                                             const std::string& job) {
  const std::string python = "/usr/bin/python3";
  if (std::system((python + " -c 'import " + module + "' 2>/dev/null").c_str()) != 0)
    return Error{script + " needs Python's " + module + " module at " + python + " (scripts/setup installs it)"};
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string stem = std::filesystem::path(script).stem().string() + "_" + std::to_string(::getpid());
  const std::string in_path = (dir / (stem + ".in.json")).string();
  const std::string out_path = (dir / (stem + ".out.json")).string();
  SLUICE_TRY(write_file(in_path, job));
  const std::string command =
      python + " " + std::string(SLUICE_SOURCE_DIR) + "/" + script + " < " + in_path + " > " + out_path;
  const int rc = std::system(command.c_str());
  Result<std::string> out = read_file(out_path);
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
  if (rc != 0 || !out.ok()) return Error{script + " failed (exit status " + std::to_string(rc) + ")"};
  return out;
}

}  // namespace sluice::testing
