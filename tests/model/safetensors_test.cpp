// The safetensors reader and the checkpoint checks against the config: each
// kind of damaged file gives an error naming the file or tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/common/io.h"
#include "sluice/model/model_runner.h"
#include "sluice/model/safetensors.h"
#include "test_models.h"

namespace sluice {
namespace {

std::string safetensors_bytes(const std::string& header, std::size_t data_bytes, std::uint64_t declared_header_bytes = 0) {
  std::string file;
  const std::uint64_t n = declared_header_bytes ? declared_header_bytes : header.size();
  file.append(reinterpret_cast<const char*>(&n), 8);
  file += header;
  file.append(data_bytes, '\x01');
  return file;
}

std::string write_tmp(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name;
  EXPECT_TRUE(write_file(path, bytes).ok());
  return path;
}

void expect_open_error(const std::string& bytes, const std::string& needle) {
  const std::string dir = testing::scratch_dir("safetensors-bad");
  const std::string path = write_tmp(dir, "model.safetensors", bytes);
  auto file = SafetensorsFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.error().message.find(needle), std::string::npos) << file.error().message;
  EXPECT_NE(file.error().message.find(path), std::string::npos) << file.error().message;
}

TEST(Safetensors, ReadsTensors) {
  const std::string dir = testing::scratch_dir("safetensors-good");
  const std::string header = R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},"__metadata__":{"x":"y"}})";
  auto file = SafetensorsFile::open(write_tmp(dir, "m.safetensors", safetensors_bytes(header, 32)));
  ASSERT_TRUE(file.ok()) << file.error_message();
  const auto& tensors = (*file)->tensors();
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors.at("a").shape, (Shape{2, 3}));
  EXPECT_EQ(tensors.at("a").dtype, DType::f32);
  EXPECT_EQ(tensors.at("b").dtype, DType::bf16);
  EXPECT_EQ(static_cast<const std::byte*>(tensors.at("b").data) - static_cast<const std::byte*>(tensors.at("a").data), 24);
}

// DeepSeek-V4's byte dtypes: E8M0 scales and FP4 experts packed two a byte as I8 (U8 elsewhere).
TEST(Safetensors, ReadsTheByteDtypesOfDeepseekV4) {
  const std::string dir = testing::scratch_dir("safetensors-bytes");
  const std::string header = R"({"w":{"dtype":"I8","shape":[2,3],"data_offsets":[0,6]},)"
                             R"("s":{"dtype":"F8_E8M0","shape":[2,1],"data_offsets":[6,8]},)"
                             R"("u":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})";
  auto file = SafetensorsFile::open(write_tmp(dir, "m.safetensors", safetensors_bytes(header, 16)));
  ASSERT_TRUE(file.ok()) << file.error_message();
  const auto& tensors = (*file)->tensors();
  EXPECT_EQ(tensors.at("w").dtype, DType::i8);
  EXPECT_EQ(tensors.at("s").dtype, DType::f8_e8m0);
  EXPECT_EQ(tensors.at("u").dtype, DType::u8);
  EXPECT_EQ(tensors.at("s").size_bytes(), 2u);
  EXPECT_STREQ(dtype_name(DType::f8_e8m0), "F8_E8M0");
  EXPECT_STREQ(dtype_name(DType::i8), "I8");
  // A byte dtype still has its size checked against the offsets.
  expect_open_error(safetensors_bytes(R"({"s":{"dtype":"F8_E8M0","shape":[4],"data_offsets":[0,8]}})", 8), "needs 4");
}

TEST(Safetensors, RejectsDamagedFiles) {
  expect_open_error("abc", "too short");
  expect_open_error(safetensors_bytes("{}", 0, 1000), "header length");
  expect_open_error(safetensors_bytes("{\"a\": [", 0), "not a JSON object");
  expect_open_error(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), "outside the data region");
  expect_open_error(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", 16), "needs 16");
  expect_open_error(safetensors_bytes(R"({"a":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}})", 4), "dtype F8_E5M2");
  expect_open_error(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "bad dimension");
  expect_open_error(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "data_offsets");
}

TEST(Safetensors, MissingFileNamesIt) {
  auto file = SafetensorsFile::open("/nonexistent/x.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.error().message.find("/nonexistent/x.safetensors"), std::string::npos);
  auto checkpoint = Checkpoint::open("/nonexistent");
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_NE(checkpoint.error().message.find("model.safetensors"), std::string::npos);
}

TEST(Safetensors, ShardedCheckpointViaIndex) {
  const std::string dir = testing::scratch_dir("safetensors-sharded");
  write_tmp(dir, "a.safetensors", safetensors_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));
  write_tmp(dir, "b.safetensors", safetensors_bytes(R"({"y":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4));
  write_tmp(dir, "model.safetensors.index.json", R"({"metadata":{},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
  auto checkpoint = Checkpoint::open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error_message();
  EXPECT_TRUE(checkpoint->get("x", {1}).ok());
  EXPECT_TRUE(checkpoint->get("y", {2}).ok());
  auto wrong_shape = checkpoint->get("y", {3});
  ASSERT_FALSE(wrong_shape.ok());
  EXPECT_NE(wrong_shape.error().message.find("'y'"), std::string::npos);
  EXPECT_NE(wrong_shape.error().message.find("[2]"), std::string::npos);
  EXPECT_FALSE(checkpoint->get("z", {1}).ok());

  write_tmp(dir, "model.safetensors.index.json", R"({"weight_map":{"x":"../escape.safetensors"}})");
  EXPECT_FALSE(Checkpoint::open(dir).ok());
  write_tmp(dir, "model.safetensors.index.json", R"({"weight_map":{"x":"missing.safetensors"}})");
  auto missing = Checkpoint::open(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("missing.safetensors"), std::string::npos);
}

// A model whose checkpoint disagrees with its config fails to load, naming the tensor.
TEST(Safetensors, ModelLoadChecksShapesAgainstConfig) {
  const std::string dir = testing::scratch_dir("model-wrong-shape");
  MakeModelOptions options{.num_layers = 1, .hidden_size = 32, .num_heads = 4, .num_kv_heads = 2,
                           .intermediate_size = 64, .vocab_size = 300, .out_dir = dir};
  ASSERT_TRUE(make_model(options).ok());
  auto config = nlohmann::json::parse(read_file(dir + "/config.json").value());
  config["intermediate_size"] = 96;
  ASSERT_TRUE(write_file(dir + "/config.json", config.dump()).ok());
  auto runner = make_model_runner(dir, make_cpu_ops({.num_threads = 1}), {});
  ASSERT_FALSE(runner.ok());
  EXPECT_NE(runner.error().message.find("mlp.gate_proj.weight"), std::string::npos) << runner.error().message;

  config["intermediate_size"] = 64;
  config["num_hidden_layers"] = 0;
  ASSERT_TRUE(write_file(dir + "/config.json", config.dump()).ok());
  EXPECT_FALSE(make_model_runner(dir, make_cpu_ops({.num_threads = 1}), {}).ok());

  // One layer fewer in the config than in the checkpoint: an unused tensor.
  ASSERT_TRUE(make_model(MakeModelOptions{.num_layers = 2, .hidden_size = 32, .num_heads = 4, .num_kv_heads = 2,
                                          .intermediate_size = 64, .vocab_size = 300, .out_dir = dir}).ok());
  config["num_hidden_layers"] = 1;
  ASSERT_TRUE(write_file(dir + "/config.json", config.dump()).ok());
  auto extra = make_model_runner(dir, make_cpu_ops({.num_threads = 1}), {});
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.error().message.find("model.layers.1."), std::string::npos) << extra.error().message;
}

TEST(Safetensors, TruncatedModelFileIsRejected) {
  const std::string dir = testing::scratch_dir("model-truncated");
  ASSERT_TRUE(make_model(MakeModelOptions{.num_layers = 1, .hidden_size = 32, .num_heads = 4, .num_kv_heads = 2,
                                          .intermediate_size = 64, .vocab_size = 300, .out_dir = dir}).ok());
  const std::string path = dir + "/model.safetensors";
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  auto runner = make_model_runner(dir, make_cpu_ops({.num_threads = 1}), {});
  ASSERT_FALSE(runner.ok());
  EXPECT_NE(runner.error().message.find("outside the data region"), std::string::npos) << runner.error().message;
}

}  // namespace
}  // namespace sluice
