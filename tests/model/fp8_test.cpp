// FP8 e4m3 weights with 128x128 block scales: the scalar conversions, and
// make-model's fp8 checkpoints dequantized by sluice against numpy computing
// the block-scale definition on its own (tests/model/fp8_reference.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "sluice/backend/float_convert.h"
#include "sluice/model/fp8_weights.h"
#include "sluice/model/make_model.h"
#include "sluice/model/safetensors.h"
#include "test_models.h"

namespace sluice {
namespace {

TEST(Fp8E4m3, KnownValuesAndRoundTrip) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);         // exponent 7 = 2^0
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);       // the largest finite value
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f || code == 0x80) continue;  // NaN, and -0 encodes as +0's sign-flipped twin
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(static_cast<std::uint8_t>(code))), code) << code;
  }
  // Ties go to the even code; past 448 saturates.
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);  // halfway between 1 and 1.125
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);  // halfway between 1.125 and 1.25
  EXPECT_EQ(f32_to_fp8_e4m3(460.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(1e9f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e9f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
}

MakeModelOptions fp8_model(DType dtype, const std::string& dir) {
  MakeModelOptions o{.architecture = Architecture::deepseek_v3, .num_layers = 2, .hidden_size = 160,
                     .num_heads = 2, .intermediate_size = 288, .vocab_size = 400, .seed = 31, .dtype = dtype,
                     .max_position_embeddings = 1024, .out_dir = dir};
  // Shapes that leave partial 128-blocks at both edges.
  o.deepseek_v3.q_lora_rank = 136;
  o.deepseek_v3.kv_lora_rank = 96;
  o.deepseek_v3.moe_intermediate_size = 72;
  o.deepseek_v3.n_routed_experts = 4;
  o.deepseek_v3.n_group = 2;
  return o;
}

std::vector<float> read_f32_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

TEST(Fp8Checkpoint, DequantizationMatchesNumpyFromTheDefinition) {
  const std::string dir = testing::scratch_dir("fp8-model");
  ASSERT_TRUE(make_model(fp8_model(DType::f8_e4m3, dir)).ok());
  const std::string python = "/usr/bin/python3";
  ASSERT_EQ(std::system((python + " -c 'import numpy' 2>/dev/null").c_str()), 0)
      << "this oracle needs Debian's python3-numpy at " << python;
  const std::string reference_dir = testing::scratch_dir("fp8-model-numpy");
  const std::string command = python + " " + SLUICE_SOURCE_DIR + "/tests/model/fp8_reference.py " + dir +
                              "/model.safetensors " + reference_dir + " > /dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  auto checkpoint = Checkpoint::open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error_message();
  const Fp8BlockQuantization block{};
  int num_fp8 = 0;
  for (const std::string& name : checkpoint->names()) {
    if (name.ends_with("_scale_inv") || !checkpoint->contains(name + "_scale_inv")) continue;
    const auto& weight = checkpoint->tensor(name);
    ASSERT_EQ(weight.dtype, DType::f8_e4m3) << name;
    auto ours = dequantize_fp8_blocks(weight, checkpoint->tensor(name + "_scale_inv"), block, name);
    ASSERT_TRUE(ours.ok()) << ours.error_message();
    const std::vector<float> numpy = read_f32_file(reference_dir + "/" + name + ".f32");
    ASSERT_EQ(numpy.size(), ours->size()) << name;
    for (std::size_t i = 0; i < numpy.size(); ++i) ASSERT_EQ(numpy[i], (*ours)[i]) << name << " element " << i;
    ++num_fp8;
  }
  // 2 layers x (q_a, q_b, kv_a, kv_b, o) + the dense MLP (3) + 4 experts x 3 + the shared expert (3).
  EXPECT_EQ(num_fp8, 2 * 5 + 3 + 4 * 3 + 3);
  // Router, norms, embedding and head stay unquantized, as in DeepSeek's checkpoints.
  EXPECT_EQ(checkpoint->tensor("model.layers.1.mlp.gate.weight").dtype, DType::bf16);
  EXPECT_EQ(checkpoint->tensor("model.layers.1.mlp.gate.e_score_correction_bias").dtype, DType::f32);
  EXPECT_EQ(checkpoint->tensor("lm_head.weight").dtype, DType::bf16);
}

// The quantizer keeps each weight within float8's precision of the f32 model
// made from the same seed: half a step of the 3-bit mantissa, relative, or
// half the smallest subnormal step times the block's scale.
TEST(Fp8Checkpoint, QuantizedWeightsStayWithinFp8PrecisionOfF32) {
  const std::string fp8_dir = testing::scratch_dir("fp8-model-q"), f32_dir = testing::scratch_dir("fp8-model-f32");
  ASSERT_TRUE(make_model(fp8_model(DType::f8_e4m3, fp8_dir)).ok());
  ASSERT_TRUE(make_model(fp8_model(DType::f32, f32_dir)).ok());
  auto fp8 = Checkpoint::open(fp8_dir);
  auto f32 = Checkpoint::open(f32_dir);
  ASSERT_TRUE(fp8.ok() && f32.ok());
  const std::string name = "model.layers.1.mlp.experts.2.down_proj.weight";
  const Tensor& scales = fp8->tensor(name + "_scale_inv");
  auto ours = dequantize_fp8_blocks(fp8->tensor(name), scales, {}, name);
  ASSERT_TRUE(ours.ok()) << ours.error_message();
  const Tensor& exact = f32->tensor(name);
  ASSERT_EQ(exact.dtype, DType::f32);
  const std::int64_t cols = exact.cols();
  for (std::int64_t i = 0; i < exact.numel(); ++i) {
    const float want = exact.as<const float>()[i];
    const float scale = scales.as<const float>()[(i / cols) / 128 * scales.cols() + (i % cols) / 128];
    const float bound = std::max(std::fabs(want) / 16.0f, scale * std::ldexp(1.0f, -10));
    ASSERT_LE(std::fabs((*ours)[i] - want), bound) << i;
  }
}

TEST(Fp8Checkpoint, ShardedCheckpointHasTheSameTensors) {
  const std::string one = testing::scratch_dir("fp8-one"), three = testing::scratch_dir("fp8-three");
  MakeModelOptions o = fp8_model(DType::f8_e4m3, one);
  ASSERT_TRUE(make_model(o).ok());
  o.out_dir = three;
  o.num_shards = 3;
  ASSERT_TRUE(make_model(o).ok());
  EXPECT_TRUE(std::filesystem::exists(three + "/model-00003-of-00003.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(three + "/model.safetensors.index.json"));
  auto a = Checkpoint::open(one);
  auto b = Checkpoint::open(three);
  ASSERT_TRUE(a.ok() && b.ok()) << a.error_message() << b.error_message();
  ASSERT_EQ(a->names(), b->names());
  for (const std::string& name : a->names()) {
    const Tensor& x = a->tensor(name);
    const Tensor& y = b->tensor(name);
    ASSERT_TRUE(x.shape == y.shape && x.dtype == y.dtype) << name;
    ASSERT_EQ(std::memcmp(x.data, y.data, x.size_bytes()), 0) << name;
  }
}

}  // namespace
}  // namespace sluice
