// Runs a shell command for CLI tests: its exit code and its stdout + stderr.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace sluice::testing {

struct RunResult {
  int exit_code = -1;   // 128 + signal number when the process was killed
  std::string output;  // stdout and stderr together
};

// `args` follow the sluice binary of this build tree.
inline RunResult run_sluice(const std::string& args) {
  const std::string command = std::string(SLUICE_BINARY_DIR) + "/sluice " + args + " 2>&1";
  RunResult result;
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (!pipe) return result;
  std::array<char, 4096> buffer;
  while (std::fgets(buffer.data(), buffer.size(), pipe)) result.output += buffer.data();
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace sluice::testing
