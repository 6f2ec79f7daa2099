// `sluice calibrate` end to end on a two-lane trace: the decode lane's steps
// ran beside prefill chunks, so their times are not the steps' own and the fit
// leaves them out (and says how many); a trace of decode-lane steps alone
// leaves nothing to fit.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace sluice::sim
