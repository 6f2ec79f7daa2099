// DeepSeek-V4's checkpoint formats: the e2m1 and e8m0 codes against their
// definitions, FP4 groups, make-model's FP8 + FP4 layout, our dequantization
// against numpy's (tests/fixtures/dequant_deepseek_v4_fp8.safetensors, from
// tools/reference/dequant_fp4_fp8.py), and the quantized model's logits
// against the f32 model of the same dequantized weights.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <span>

#include <nlohmann/json.hpp>

#include "sluice/backend/float_convert.h"
#include "sluice/common/io.h"
#include "sluice/model/fp4_weights.h"
#include "sluice/model/fp8_weights.h"
#include "sluice/model/make_model.h"
#include "sluice/model/safetensors.h"
#include "test_models.h"

namespace sluice {
namespace {

std::uint32_t bits_of(float value) { return std::bit_cast<std::uint32_t>(value); }

// ---- the codes, against their definitions --------------------------------

TEST(MicroscalingCodes, E2m1DecodesEveryCodeAsTheOcpTable) {
  // OCP MX spec, FP4 E2M1: sign, exponent (bias 1), mantissa; written out.
  const float table[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                           -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int code = 0; code < 16; ++code)
    EXPECT_EQ(bits_of(fp4_e2m1_to_f32(static_cast<std::uint8_t>(code))), bits_of(table[code])) << code;
}

TEST(MicroscalingCodes, E8m0DecodesEveryCodeAsAPowerOfTwo) {
  for (int code = 0; code < 255; ++code) {
    // 2^(code - 127) by repeated doubling or halving in double: exact, and
    // computed without the f32 bit layout the decoder uses.
    double expected = 1.0;
    for (int i = 0; i < code - 127; ++i) expected *= 2.0;
    for (int i = 0; i < 127 - code; ++i) expected /= 2.0;
    EXPECT_EQ(bits_of(e8m0_to_f32(static_cast<std::uint8_t>(code))), bits_of(static_cast<float>(expected))) << code;
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));  // an f32 subnormal, still exact
  EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.0f, 127));
}

TEST(MicroscalingCodes, E2m1EncodesNearestTiesToEven) {
  for (int code = 0; code < 16; ++code)
    EXPECT_EQ(f32_to_fp4_e2m1(fp4_e2m1_to_f32(static_cast<std::uint8_t>(code))), code) << code;
  // The ties of the grid {0, .5, 1, 1.5, 2, 3, 4, 6} go to the even code.
  const std::map<float, std::uint8_t> ties = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4},
                                              {2.5f, 4},  {3.5f, 6},  {5.0f, 6}};
  for (auto [value, code] : ties) {
    EXPECT_EQ(f32_to_fp4_e2m1(value), code) << value;
    EXPECT_EQ(f32_to_fp4_e2m1(-value), code | 0x8) << -value;
  }
  EXPECT_EQ(f32_to_fp4_e2m1(0.26f), 1);
  EXPECT_EQ(f32_to_fp4_e2m1(5.01f), 7);
  EXPECT_EQ(f32_to_fp4_e2m1(100.0f), 7);  // saturates at 6
  EXPECT_EQ(f32_to_fp4_e2m1(-100.0f), 15);
}

TEST(MicroscalingCodes, E8m0CeilIsTheSmallestPowerOfTwoNotBelow) {
  EXPECT_EQ(f32_to_e8m0_ceil(1.0f), 127);
  EXPECT_EQ(f32_to_e8m0_ceil(std::nextafter(1.0f, 2.0f)), 128);
  EXPECT_EQ(f32_to_e8m0_ceil(0.75f), 127);
  EXPECT_EQ(f32_to_e8m0_ceil(0.5f), 126);
  EXPECT_EQ(f32_to_e8m0_ceil(3.0f), 129);
  EXPECT_EQ(f32_to_e8m0_ceil(std::ldexp(1.0f, -126)), 1);
}

// ---- FP4 groups ------------------------------------------------------------

Tensor view(std::vector<std::uint8_t>& bytes, DType dtype, Shape shape) { return Tensor{bytes.data(), dtype, shape}; }

TEST(Fp4Groups, LowNibbleIsTheEvenInput) {
  // One row of 4 inputs: bytes 0x21, 0xf7 -> codes 1, 2, 7, 15 -> 0.5, 1, 6, -6, times 2^(125 - 127).
  std::vector<std::uint8_t> packed = {0x21, 0xf7}, scale = {125};
  auto w = dequantize_fp4_groups(view(packed, DType::i8, {1, 2}), view(scale, DType::f8_e8m0, {1, 1}), {1, 4}, "w");
  ASSERT_TRUE(w.ok()) << w.error_message();
  EXPECT_EQ(*w, (std::vector<float>{0.125f, 0.25f, 1.5f, -1.5f}));
}

TEST(Fp4Groups, QuantizedWeightsStayWithinE2m1PrecisionPerGroup) {
  const Shape shape{3, 70};  // groups of 32, 32 and a partial 6
  std::vector<float> values(210);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = std::sin(0.37f * static_cast<float>(i)) * (i % 32 == 5 ? 3.0f : 0.2f) * (i < 64 ? 1.0f : 1e-3f);
  for (int c = 64; c < 70; ++c) values[2 * 70 + c] = 0.0f;  // an all-zero group
  const Fp4Groups q = quantize_fp4_groups(values, shape);
  ASSERT_EQ(q.packed.size(), 105u);
  ASSERT_EQ(q.scale_codes.size(), 9u);
  std::vector<std::uint8_t> packed = q.packed, scales = q.scale_codes;
  auto w = dequantize_fp4_groups(view(packed, DType::u8, fp4_packed_shape(shape)),
                                 view(scales, DType::f8_e8m0, fp4_scale_shape(shape)), shape, "w");
  ASSERT_TRUE(w.ok()) << w.error_message();
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::int64_t g = 0; g < 3; ++g) {
      float amax = 0.0f;
      for (std::int64_t c = g * 32; c < std::min<std::int64_t>(70, g * 32 + 32); ++c)
        amax = std::max(amax, std::fabs(values[r * 70 + c]));
      const float scale = e8m0_to_f32(q.scale_codes[r * 3 + g]);
      if (amax == 0.0f) {
        EXPECT_EQ(scale, 1.0f);
      } else {  // the smallest power of two that puts amax at or under e2m1's 6
        EXPECT_GE(6.0f * scale, amax) << r << " " << g;
        EXPECT_LT(3.0f * scale, amax) << r << " " << g;
      }
      for (std::int64_t c = g * 32; c < std::min<std::int64_t>(70, g * 32 + 32); ++c) {
        const float want = values[r * 70 + c], units = std::fabs(want) / scale;
        const float half_step = units < 2.0f ? 0.25f : units < 4.0f ? 0.5f : 1.0f;  // e2m1's grid spacing / 2
        EXPECT_LE(std::fabs((*w)[r * 70 + c] - want), half_step * scale) << r << " " << c;
      }
    }
}

TEST(Fp4Groups, RefusesOtherGroupSizesAndNanScales) {
  std::vector<std::uint8_t> packed(2 * 32, 0x11), group16(2 * 4, 127), nan_scale = {127, 0xff};
  auto wrong = dequantize_fp4_groups(view(packed, DType::i8, {2, 32}), view(group16, DType::f8_e8m0, {2, 4}),
                                     {2, 64}, "layers.0.ffn.experts.3.w2.weight");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error_message().find("one per 32 inputs"), std::string::npos) << wrong.error_message();
  EXPECT_NE(wrong.error_message().find("experts.3.w2"), std::string::npos) << wrong.error_message();
  auto nan = dequantize_fp4_groups(view(packed, DType::i8, {2, 32}), view(nan_scale, DType::f8_e8m0, {2, 2}),
                                   {2, 64}, "w");
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.error_message().find("NaN"), std::string::npos) << nan.error_message();
  auto f32_scales = dequantize_fp4_groups(view(packed, DType::i8, {2, 32}), view(group16, DType::f32, {2, 1}),
                                          {2, 64}, "w");
  EXPECT_FALSE(f32_scales.ok());
}

TEST(Fp8Blocks, E8m0ScalesDequantizeAsTheirPowersOfTwo) {
  // A [2, 130] weight in [1, 2] blocks of 128: every value is 1.5 (0x3c), scales 2^-3 and 2^4.
  std::vector<std::uint8_t> weight(260, 0x3c), scale = {124, 131};
  auto w = dequantize_fp8_blocks(view(weight, DType::f8_e4m3, {2, 130}), view(scale, DType::f8_e8m0, {1, 2}), {},
                                 "w");
  ASSERT_TRUE(w.ok()) << w.error_message();
  EXPECT_EQ((*w)[0], 0.1875f);
  EXPECT_EQ((*w)[127], 0.1875f);
  EXPECT_EQ((*w)[128], 24.0f);
  EXPECT_EQ((*w)[130 + 129], 24.0f);
  // Kept on the device, the scales must be F32 (Tensor::scales is a float grid).
  EXPECT_FALSE(check_fp8_scales(view(weight, DType::f8_e4m3, {2, 130}), view(scale, DType::f8_e8m0, {1, 2}), {},
                                "w")
                   .ok());
}

// ---- make-model's layout and the numpy fixture ------------------------------

struct Fixture {
  std::unique_ptr<SafetensorsFile> file;
  nlohmann::json make_model_flags;
};

Fixture read_fixture() {
  const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/fixtures/dequant_deepseek_v4_fp8.safetensors";
  auto file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.ok()) << file.error_message();
  if (!file.ok()) return {};
  std::ifstream in(path, std::ios::binary);
  std::uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  std::string header(header_bytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  const auto metadata = nlohmann::json::parse(header).at("__metadata__");
  return Fixture{std::move(*file), nlohmann::json::parse(metadata.at("make_model").get<std::string>())};
}

// The fixture's model, rebuilt by make-model from the flags it records.
std::string make_fixture_model(const Fixture& fixture, const std::string& name) {
  const std::string dir = testing::scratch_dir(name);
  const Status made = make_model(testing::make_model_options_from_flags(fixture.make_model_flags, dir));
  EXPECT_TRUE(made.ok()) << made.error_message();
  return dir;
}

TEST(DeepseekV4Fp8Checkpoint, WritesTheLayoutV4FlashShips) {
  const Fixture fixture = read_fixture();
  ASSERT_TRUE(fixture.file);
  const std::string dir = make_fixture_model(fixture, "v4-fp8-layout");
  auto checkpoint = Checkpoint::open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error_message();
  auto expect = [&](const std::string& name, DType dtype, Shape shape) {
    ASSERT_TRUE(checkpoint->contains(name)) << name;
    EXPECT_EQ(checkpoint->tensor(name).dtype, dtype) << name;
    EXPECT_EQ(checkpoint->tensor(name).shape, shape) << name;
  };
  // Dense FP8: e4m3 with one E8M0 scale per 128x128 block (partial at the edges).
  expect("layers.0.attn.wq_b.weight", DType::f8_e4m3, {160, 32});
  expect("layers.0.attn.wq_b.scale", DType::f8_e8m0, {2, 1});
  expect("layers.1.attn.wo_b.weight", DType::f8_e4m3, {80, 144});
  expect("layers.1.attn.wo_b.scale", DType::f8_e8m0, {1, 2});
  expect("layers.0.attn.indexer.wq_b.scale", DType::f8_e8m0, {2, 1});
  expect("layers.0.ffn.shared_experts.w2.weight", DType::f8_e4m3, {80, 16});
  // Routed experts: I8 pairs and one E8M0 scale per 32 inputs.
  expect("layers.1.ffn.experts.3.w1.weight", DType::i8, {16, 40});
  expect("layers.1.ffn.experts.3.w1.scale", DType::f8_e8m0, {16, 3});
  expect("layers.1.ffn.experts.3.w2.weight", DType::i8, {80, 8});
  expect("layers.1.ffn.experts.3.w2.scale", DType::f8_e8m0, {80, 1});
  // What V4-Flash keeps in bf16 / f32.
  expect("layers.0.attn.compressor.wkv.weight", DType::bf16, {64, 80});
  expect("layers.0.attn.indexer.weights_proj.weight", DType::bf16, {16, 80});
  expect("layers.0.ffn.gate.weight", DType::bf16, {4, 80});
  expect("layers.1.ffn.gate.bias", DType::f32, {4});
  expect("head.weight", DType::bf16, {512, 80});
  auto text = read_file(dir + "/config.json");
  ASSERT_TRUE(text.ok());
  const auto config = nlohmann::json::parse(*text);
  EXPECT_EQ(config.at("expert_dtype"), "fp4");
  EXPECT_EQ(config.at("quantization_config").at("scale_fmt"), "ue8m0");
  EXPECT_EQ(config.at("quantization_config").at("weight_block_size"), nlohmann::json::array({128, 128}));
}

// Every scaled weight, dequantized by sluice, is the numpy oracle's, bit for bit.
TEST(DeepseekV4Fp8Checkpoint, DequantizationMatchesNumpyFromTheDefinitions) {
  const Fixture fixture = read_fixture();
  ASSERT_TRUE(fixture.file);
  const std::string dir = make_fixture_model(fixture, "v4-fp8-numpy");
  auto checkpoint = Checkpoint::open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error_message();
  int num_scales = 0, num_fp4 = 0;
  for (const std::string& name : checkpoint->names()) {
    if (!name.ends_with(".scale")) continue;
    ++num_scales;
    const std::string weight_name = name.substr(0, name.size() - 6) + ".weight";
    const Tensor& weight = checkpoint->tensor(weight_name);
    ASSERT_TRUE(fixture.file->tensors().count(weight_name)) << weight_name << " is missing from the fixture";
    const Tensor& numpy = fixture.file->tensors().at(weight_name);
    Result<std::vector<float>> ours = Error{"unset"};
    if (weight.dtype == DType::i8) {
      ++num_fp4;
      ours = dequantize_fp4_groups(weight, checkpoint->tensor(name), numpy.shape, weight_name);
    } else {
      ours = dequantize_fp8_blocks(weight, checkpoint->tensor(name), {}, weight_name);
    }
    ASSERT_TRUE(ours.ok()) << ours.error_message();
    ASSERT_EQ(numpy.numel(), static_cast<std::int64_t>(ours->size())) << weight_name;
    EXPECT_EQ(std::memcmp(numpy.data, ours->data(), numpy.size_bytes()), 0) << weight_name;
  }
  EXPECT_EQ(num_scales, static_cast<int>(fixture.file->tensors().size()));
  // 2 layers x 4 experts x 3 projections.
  EXPECT_EQ(num_fp4, 24);
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", dtype_name(t.dtype)},
                    {"shape", std::vector<std::int64_t>(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.rank)},
                    {"data_offsets", {offset, offset + t.size_bytes()}}};
    offset += t.size_bytes();
  }
  const std::string text = header.dump();
  const std::uint64_t header_bytes = text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&header_bytes), 8);
  out << text;
  for (const auto& [name, t] : tensors) out.write(static_cast<const char*>(t.data), t.size_bytes());
}

// The FP8 + FP4 model and the f32 model of numpy's dequantized weights (every
// other tensor copied as stored) compute the same logits, bit for bit: the
// loader decodes exactly, and nothing else differs.
TEST(DeepseekV4Fp8Checkpoint, LogitsEqualTheF32ModelOfTheDequantizedWeights) {
  const Fixture fixture = read_fixture();
  ASSERT_TRUE(fixture.file);
  const std::string fp8_dir = make_fixture_model(fixture, "v4-fp8-logits");
  const std::string f32_dir = testing::scratch_dir("v4-fp8-logits-f32");
  auto checkpoint = Checkpoint::open(fp8_dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error_message();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : checkpoint->names()) {
    if (name.ends_with(".scale")) continue;
    const auto& dequantized = fixture.file->tensors();
    tensors.emplace_back(name, dequantized.count(name) ? dequantized.at(name) : checkpoint->tensor(name));
  }
  write_safetensors(f32_dir + "/model.safetensors", tensors);
  auto text = read_file(fp8_dir + "/config.json");
  ASSERT_TRUE(text.ok());
  auto config = nlohmann::json::parse(*text);
  config.erase("quantization_config");
  config.erase("expert_dtype");
  config["torch_dtype"] = "float32";
  ASSERT_TRUE(write_file(f32_dir + "/config.json", config.dump(2)).ok());

  auto quantized = testing::load_deepseek_v4_on_cpu(fp8_dir);
  ASSERT_TRUE(quantized.ok()) << quantized.error_message();
  auto plain = testing::load_deepseek_v4_on_cpu(f32_dir);
  ASSERT_TRUE(plain.ok()) << plain.error_message();
  const DeepseekV4Reference& a = *(*quantized)->model;
  const DeepseekV4Reference& b = *(*plain)->model;
  // 40 tokens cross 10 CSA windows, two HCA windows and the 8-token sliding window.
  std::vector<TokenId> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 53 + 7) % 500);
  auto seq_a = a.start_sequence();
  auto seq_b = b.start_sequence();
  auto logits_a = a.append(seq_a, prompt);
  auto logits_b = b.append(seq_b, prompt);
  ASSERT_TRUE(logits_a.ok() && logits_b.ok()) << logits_a.error_message() << logits_b.error_message();
  for (int step = 0; step < 4; ++step) {
    ASSERT_EQ(logits_a->size(), logits_b->size());
    EXPECT_EQ(std::memcmp(logits_a->data(), logits_b->data(), logits_a->size() * sizeof(float)), 0) << step;
    const auto next = static_cast<TokenId>(std::max_element(logits_a->begin(), logits_a->end()) - logits_a->begin());
    logits_a = a.append(seq_a, std::span(&next, 1));
    logits_b = b.append(seq_b, std::span(&next, 1));
    ASSERT_TRUE(logits_a.ok() && logits_b.ok());
  }
  float spread = 0.0f;
  for (float v : *logits_a) spread = std::max(spread, std::fabs(v - logits_a->front()));
  EXPECT_GT(spread, 0.1f);  // logits that mean something: not a constant row
}

// V4-Flash-Base and V4-Pro-Base store the dense `.scale` blocks as F32 powers
// of two: the same checkpoint with its E8M0 block scales rewritten as F32
// gives the same logits, bit for bit.
TEST(DeepseekV4Fp8Checkpoint, F32BlockScalesReadAsTheirE8m0Twins) {
  const Fixture fixture = read_fixture();
  ASSERT_TRUE(fixture.file);
  const std::string e8m0_dir = make_fixture_model(fixture, "v4-fp8-e8m0-scales");
  const std::string f32_dir = testing::scratch_dir("v4-fp8-f32-scales");
  std::filesystem::copy_file(e8m0_dir + "/config.json", f32_dir + "/config.json");
  int num_rewritten = 0;
  {
    auto checkpoint = Checkpoint::open(e8m0_dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.error_message();
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::vector<std::vector<float>> f32_scales;
    f32_scales.reserve(checkpoint->names().size());
    for (const std::string& name : checkpoint->names()) {
      const Tensor& t = checkpoint->tensor(name);
      const std::string weight = name.ends_with(".scale") ? name.substr(0, name.size() - 6) + ".weight" : "";
      if (weight.empty() || checkpoint->tensor(weight).dtype != DType::f8_e4m3) {
        tensors.emplace_back(name, t);
        continue;
      }
      auto& scales = f32_scales.emplace_back();
      for (std::int64_t i = 0; i < t.numel(); ++i) scales.push_back(e8m0_to_f32(t.as<const std::uint8_t>()[i]));
      tensors.emplace_back(name, Tensor{scales.data(), DType::f32, t.shape});
      ++num_rewritten;
    }
    write_safetensors(f32_dir + "/model.safetensors", tensors);
  }
  EXPECT_EQ(num_rewritten, 2 * 5 + 1 + 2 * 3);  // attention x 5, the indexer's wq_b, shared experts x 3, per layer
  auto a = testing::load_deepseek_v4_on_cpu(e8m0_dir);
  auto b = testing::load_deepseek_v4_on_cpu(f32_dir);
  ASSERT_TRUE(a.ok() && b.ok()) << a.error_message() << b.error_message();
  std::vector<TokenId> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back((i * 31 + 3) % 500);
  auto seq_a = (*a)->model->start_sequence();
  auto seq_b = (*b)->model->start_sequence();
  auto logits_a = (*a)->model->append(seq_a, prompt);
  auto logits_b = (*b)->model->append(seq_b, prompt);
  ASSERT_TRUE(logits_a.ok() && logits_b.ok()) << logits_a.error_message() << logits_b.error_message();
  EXPECT_EQ(*logits_a, *logits_b);
}

// A checkpoint whose routed experts carry scales per 16 inputs (not V4's
// format) is refused by name, not read as if its groups were 32 wide.
TEST(DeepseekV4Fp8Checkpoint, RefusesExpertScalesOfAnotherGroupSize) {
  const Fixture fixture = read_fixture();
  ASSERT_TRUE(fixture.file);
  const std::string dir = make_fixture_model(fixture, "v4-fp8-group16");
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<std::uint8_t> group16(16 * 5, 127);
  {
    auto checkpoint = Checkpoint::open(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.error_message();
    for (const std::string& name : checkpoint->names())
      tensors.emplace_back(name, checkpoint->tensor(name));
    for (auto& [name, t] : tensors)
      if (name == "layers.1.ffn.experts.2.w3.scale") t = Tensor{group16.data(), DType::f8_e8m0, Shape{16, 5}};
    write_safetensors(dir + "/model-group16.safetensors", tensors);
  }
  std::filesystem::rename(dir + "/model-group16.safetensors", dir + "/model.safetensors");
  auto loaded = testing::load_deepseek_v4_on_cpu(dir);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error_message().find("layers.1.ffn.experts.2.w3"), std::string::npos) << loaded.error_message();
}

}  // namespace
}  // namespace sluice
