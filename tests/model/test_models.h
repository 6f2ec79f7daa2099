// Helpers for tests that need a tiny random-weight model on disk.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sluice/backend/batch.h"
#include "sluice/common/io.h"
#include "sluice/model/make_model.h"

namespace sluice::testing {

// A fresh directory under the build tree, removed first if it exists.
inline std::string scratch_dir(const std::string& name) {
  const std::string dir = std::string(SLUICE_BINARY_DIR) + "/test-scratch/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// MakeModelOptions from the "make_model" object of a golden fixture.
inline MakeModelOptions make_model_options(const nlohmann::json& args, const std::string& out_dir) {
  MakeModelOptions o;
  o.architecture = *parse_architecture(args.at("arch").get<std::string>());
  o.num_layers = args.at("layers");
  o.hidden_size = args.at("hidden");
  o.num_heads = args.at("heads");
  o.num_kv_heads = args.at("kv_heads");
  o.intermediate_size = args.at("intermediate");
  o.vocab_size = args.at("vocab");
  o.seed = args.at("seed");
  o.head_dim = args.at("head_dim");
  o.out_dir = out_dir;
  return o;
}

// One prompt of a golden fixture (tools/reference/golden.py).
struct GoldenCase {
  std::vector<TokenId> prompt;
  std::vector<float> prompt_logits;   // next-token logits after the prompt
  std::vector<TokenId> greedy_tokens;  // 32 greedy tokens
  std::vector<float> final_logits;    // logits of the last greedy step
};

struct Golden {
  std::string model_dir;  // the fixture's model, rebuilt by make_model
  std::vector<GoldenCase> cases;
};

// Reads tests/fixtures/golden_<arch>.json and rebuilds its model in scratch_dir(scratch_name).
inline Golden load_golden(const std::string& arch, const std::string& scratch_name) {
  auto text = read_file(std::string(SLUICE_SOURCE_DIR) + "/tests/fixtures/golden_" + arch + ".json");
  EXPECT_TRUE(text.ok()) << text.error_message();
  const auto fixture = nlohmann::json::parse(text.value());
  Golden golden;
  golden.model_dir = scratch_dir(scratch_name);
  auto status = make_model(make_model_options(fixture.at("make_model"), golden.model_dir));
  EXPECT_TRUE(status.ok()) << status.error_message();
  for (const auto& c : fixture.at("cases"))
    golden.cases.push_back({c.at("prompt"), c.at("prompt_logits"), c.at("greedy_tokens"), c.at("final_logits")});
  return golden;
}

// Blocks to hold every prompt of the fixture and its 32 generated tokens, at once.
inline std::int32_t num_blocks_for(const Golden& golden, std::int32_t block_size) {
  std::size_t blocks = 0;
  for (const GoldenCase& c : golden.cases) blocks += (c.prompt.size() + 32 + block_size - 1) / block_size;
  return static_cast<std::int32_t>(blocks);
}

}  // namespace sluice::testing
