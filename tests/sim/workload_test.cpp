// The planner's workloads: the built-in report workload and JSONL traces.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sluice/sim/workload.h"

namespace sluice::sim {
namespace {

TEST(Workload, ReportWorkloadFitsTheContext) {
  const auto full = report_workload(1048576);
  ASSERT_EQ(full.size(), 16u);
  EXPECT_EQ(full[8].num_prompt_tokens, 30000);
  EXPECT_EQ(full.back().num_prompt_tokens, 300000);
  EXPECT_EQ(full.back().num_output_tokens, 8000);
  EXPECT_DOUBLE_EQ(full.back().arrival_ms, 10000);
  for (std::int32_t max_len : {4096, 131072}) {
    for (const auto& r : report_workload(max_len)) {
      EXPECT_GE(r.num_prompt_tokens, 1);
      EXPECT_LE(r.num_prompt_tokens + r.num_output_tokens, max_len);
    }
  }
}

TEST(Workload, ReadsJsonlTraces) {
  const std::string path = std::string(SLUICE_BINARY_DIR) + "/sim_workload_test.jsonl";
  {
    std::ofstream out(path);
    out << R"({"timestamp": 2000, "input_length": 300, "output_length": 20, "hash_ids": [1]})" << "\n\n"
        << R"({"timestamp": 0, "input_length": 100, "output_length": 10})" << "\n"
        << R"({"input_length": 5, "output_length": 1})" << "\n";
  }
  auto all = load_workload_jsonl(path, 0);
  ASSERT_TRUE(all.ok()) << all.error_message();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].num_prompt_tokens, 100);  // sorted by arrival
  EXPECT_EQ((*all)[2].num_prompt_tokens, 300);
  EXPECT_DOUBLE_EQ((*all)[2].arrival_ms, 2000);
  auto first = load_workload_jsonl(path, 1);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->size(), 1u);
  {
    std::ofstream out(path);
    out << R"({"input_length": 100})" << "\n";
  }
  auto bad = load_workload_jsonl(path, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error_message().find("output_length"), std::string::npos) << bad.error_message();
  {
    std::ofstream out(path);
    out << "not json\n";
  }
  EXPECT_FALSE(load_workload_jsonl(path, 0).ok());
  EXPECT_FALSE(load_workload_jsonl(path + ".missing", 0).ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace sluice::sim
