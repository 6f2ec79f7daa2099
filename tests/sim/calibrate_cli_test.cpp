// `sluice calibrate` end to end on a two-lane trace: the decode lane's steps
// ran beside prefill chunks, so their times are not the steps' own and the fit
// leaves them out (and says how many); a trace of decode-lane steps alone
// leaves nothing to fit.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "../support/run_command.h"

namespace sluice::sim {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string scratch_file(const std::string& name) {
  const std::string dir = std::string(SLUICE_BINARY_DIR) + "/test-scratch/calibrate-cli";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

TEST(CalibrateCli, DecodeLaneStepsAreLeftOutOfTheFit) {
  const std::string path = scratch_file("calibrate-lanes.jsonl");
  {
    std::ofstream out(path);
    for (int i = 0; i < 6; ++i)
      out << R"({"start_ms":)" << i * 400 << R"(,"measured_ms":)" << 300 + 10 * i
          << R"(,"predicted_ms":280,"lane":"main","seqs":[[2048,)" << 2048 * i << "]]}\n";
    for (int i = 0; i < 3; ++i)
      out << R"({"start_ms":)" << 5 + i * 40
          << R"(,"measured_ms":40,"predicted_ms":6,"lane":"decode","seqs":[[1,700],[1,800]]})" << "\n";
  }
  const auto r = testing::run_sluice("calibrate --profile llama-3-8b --trace " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "3 decode-lane steps left out")) << r.output;
  EXPECT_TRUE(contains(r.output, "6 steps from")) << r.output;

  const std::string decode_only = scratch_file("calibrate-decode-only.jsonl");
  std::ofstream(decode_only) << R"({"measured_ms":40,"lane":"decode","seqs":[[1,700]]})" << "\n";
  const auto none = testing::run_sluice("calibrate --profile llama-3-8b --trace " + decode_only);
  EXPECT_NE(none.exit_code, 0) << none.output;
  EXPECT_TRUE(contains(none.output, "no steps")) << none.output;
}

// A step that built a plan on its path (StepOutput::setup_ms) is left out too.
TEST(CalibrateCli, SetupStepsAreLeftOutOfTheFit) {
  const std::string path = scratch_file("calibrate-setup.jsonl");
  {
    std::ofstream out(path);
    for (int i = 0; i < 6; ++i)
      out << R"({"start_ms":)" << i * 400 << R"(,"measured_ms":)" << 300 + 10 * i
          << (i < 2 ? R"(,"setup_ms":900)" : "") << R"(,"predicted_ms":280,"seqs":[[2048,)" << 2048 * i << "]]}\n";
  }
  const auto r = testing::run_sluice("calibrate --profile llama-3-8b --trace " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "2 steps left out whose time is not their shape's")) << r.output;
  EXPECT_TRUE(contains(r.output, "4 steps from")) << r.output;
}

// Prefill steps bucketed by the deepest cached prefix their chunks run over,
// each bucket's median measured / prior: here the steps over a 10k prefix
// took a thousand times longer than those from zero, and must show it.
TEST(CalibrateCli, PrefillStepsByCachedPrefixDepth) {
  const std::string path = scratch_file("calibrate-prefix-depth.jsonl");
  {
    std::ofstream out(path);
    for (int i = 0; i < 3; ++i)
      out << R"({"start_ms":)" << i * 400 << R"(,"measured_ms":1,"predicted_ms":100,"seqs":[[2048,0]]})" << "\n";
    for (int i = 0; i < 2; ++i)
      out << R"({"start_ms":)" << 2000 + i * 400
          << R"(,"measured_ms":5000,"predicted_ms":100,"seqs":[[2048,10000],[1,700]]})" << "\n";
    out << R"({"start_ms":3000,"measured_ms":20,"predicted_ms":20,"seqs":[[1,700],[1,800]]})" << "\n";
  }
  const auto r = testing::run_sluice("calibrate --profile llama-3-8b --trace " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto at = r.output.find("prefill steps by their deepest cached prefix");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  // "... none R (3) 8-16k R (2)": no <8k or longer buckets, and the decode-only step in none.
  double none = 0, mid = 0;
  ASSERT_EQ(std::sscanf(line.substr(line.find(" none ")).c_str(), " none %lf (3) 8-16k %lf (2)", &none, &mid), 2)
      << line;
  EXPECT_FALSE(contains(line, "<8k")) << line;
  EXPECT_FALSE(contains(line, "16-32k")) << line;
  EXPECT_GT(mid, 100 * none) << line;
}

}  // namespace
}  // namespace sluice::sim
