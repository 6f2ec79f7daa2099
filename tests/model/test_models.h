// Helpers for tests that need a tiny random-weight model on disk.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

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

}  // namespace sluice::testing
