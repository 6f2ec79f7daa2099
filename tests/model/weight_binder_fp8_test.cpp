// WeightBinder's FP8 decision against the checkpoint itself: a backend that
// keeps FP8 weights (Ops::keeps_fp8_block_weights) receives the checkpoint's
// e4m3 bytes with its `_scale_inv` on Tensor::scales, except where the
// architecture's use forbids it (another op reads the weight, a row slice off
// a block row, stacked parts off block rows), which arrive dequantized as on
// the CPU.
#include <gtest/gtest.h>

#include <cstring>

#include "sluice/model/config.h"
#include "sluice/model/fp8_weights.h"
#include "sluice/model/make_model.h"
#include "sluice/model/safetensors.h"
#include "sluice/model/weight_binder.h"
#include "test_models.h"

namespace sluice {
namespace {

// An Ops that only uploads: it answers keeps_fp8_block_weights as told and
// hands back the host tensor it was given (the last one stacked), as the CPU
// backend hands back its views. The step ops are never called here.
class UploadOnlyOps final : public Ops {
 public:
  explicit UploadOnlyOps(bool keeps_fp8) : keeps_fp8_(keeps_fp8) {}

  std::vector<std::vector<Tensor>> uploads;  // the parts of each upload, in order

  bool keeps_fp8_block_weights(std::int32_t block_rows, std::int32_t block_cols) const override {
    return keeps_fp8_ && block_rows == 128 && block_cols == 128;
  }
  DType activation_dtype() const override { return DType::f32; }
  Result<Tensor> upload_weight(const Tensor& host) override {
    uploads.push_back({host});
    return host;
  }
  Result<Tensor> upload_concatenated(std::span<const Tensor> parts) override {
    uploads.emplace_back(parts.begin(), parts.end());
    return parts.front();
  }
  Status allocate_kv_cache(const KvCacheSpec&) override { return unused(); }
  Tensor scratch(Shape, DType) override { return unused_tensor(); }
  void begin_step(const StepLayout&) override { fail(); }
  void embedding(const Tensor&, Tensor) override { fail(); }
  void rms_norm(const Tensor&, const Tensor&, float, Tensor) override { fail(); }
  void add_rms_norm(Tensor, const Tensor&, const Tensor&, float, Tensor) override { fail(); }
  void matmul(const Tensor&, const Tensor&, const Tensor&, Tensor) override { fail(); }
  void rope(Tensor, Tensor, const RopeParams&) override { fail(); }
  void attention(std::int32_t, const Tensor&, const Tensor&, const Tensor&, float, Tensor) override { fail(); }
  void silu_mul(const Tensor&, Tensor) override { fail(); }
  Status rope_partial(Tensor, std::int32_t, std::int32_t, const RopeParams&) override { return unused(); }
  Status mla_attention(std::int32_t, const MlaInputs&, const MlaShape&, Tensor) override { return unused(); }
  Status moe_route(const Tensor&, const Tensor&, const MoeRouting&, MoeAssignment) override { return unused(); }
  Status moe_experts(const Tensor&, const MoeExpertWeights&, const MoeAssignment&, Tensor) override {
    return unused();
  }
  void gather_sample_rows(const Tensor&, Tensor) override { fail(); }
  std::vector<SampleResult> sample(const Tensor&, std::span<const SampleRequest>) override {
    fail();
    return {};
  }

 private:
  static void fail() { ADD_FAILURE() << "WeightBinder called a step op"; }
  static Status unused() {
    fail();
    return Error{"unused"};
  }
  static Tensor unused_tensor() {
    fail();
    return Tensor{};
  }
  bool keeps_fp8_;
};

// Widths on 128-row blocks (kv_a_proj: 128 latent rows, then the rope key rows), experts of 128 rows.
MakeModelOptions aligned_fp8_model(const std::string& dir) {
  MakeModelOptions o{.architecture = Architecture::deepseek_v3, .num_layers = 2, .hidden_size = 256,
                     .num_heads = 2, .intermediate_size = 256, .vocab_size = 300, .seed = 41,
                     .dtype = DType::f8_e4m3, .max_position_embeddings = 1024, .out_dir = dir};
  o.deepseek_v3.q_lora_rank = 128;
  o.deepseek_v3.kv_lora_rank = 128;
  o.deepseek_v3.moe_intermediate_size = 128;
  o.deepseek_v3.n_routed_experts = 4;
  o.deepseek_v3.n_group = 2;
  return o;
}

struct Bound {
  std::string dir;
  Checkpoint checkpoint;
  ModelConfig config;
};

Bound made(const std::string& name) {
  const std::string dir = testing::scratch_dir(name);
  const MakeModelOptions options = aligned_fp8_model(dir);
  EXPECT_TRUE(make_model(options).ok());
  auto checkpoint = Checkpoint::open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.error_message();
  auto config = load_model_config(dir);
  EXPECT_TRUE(config.ok()) << config.error_message();
  return Bound{dir, std::move(checkpoint).value(), std::move(config).value()};
}

// A made checkpoint and a binder over it, for a backend that keeps FP8 or not.
struct Binding {
  Binding(const std::string& name, bool keeps_fp8)
      : b(made(name)), ops(keeps_fp8), bind(b.checkpoint, ops, no_progress, b.config.fp8, buffers) {}
  Bound b;
  UploadOnlyOps ops;
  HostWeightBuffers buffers;
  const LoadProgress no_progress;
  WeightBinder bind;
};

const std::string kKvA = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight";
const std::string kKvB = "model.layers.0.self_attn.kv_b_proj.weight";

TEST(WeightBinderFp8, KeptWeightsCarryTheCheckpointsBytesAndScales) {
  Binding binding("binder-fp8-kept", true);
  const Bound& b = binding.b;
  ASSERT_TRUE(b.config.fp8.has_value());
  WeightBinder& bind = binding.bind;
  auto kv_a = bind.weight(kKvA, b.checkpoint.tensor(kKvA).shape, {.row_slice_at = 128});
  ASSERT_TRUE(kv_a.ok()) << kv_a.error_message();
  EXPECT_EQ(kv_a->dtype, DType::f8_e4m3);
  EXPECT_EQ(kv_a->data, b.checkpoint.tensor(kKvA).data);
  EXPECT_EQ(kv_a->scales.data, b.checkpoint.tensor(kKvA + "_scale_inv").as<const float>());
  EXPECT_EQ(kv_a->scales.block_rows, 128);
  EXPECT_EQ(kv_a->scales.row_stride, 2);  // 256 columns: 2 blocks
  EXPECT_TRUE(binding.buffers.empty());
  // An expert's gate and up, 128 rows each: stacked, still FP8.
  const std::string e = "model.layers.1.mlp.experts.3.";
  auto gate_up = bind.concatenated({{e + "gate_proj.weight", {128, 256}}, {e + "up_proj.weight", {128, 256}}});
  ASSERT_TRUE(gate_up.ok()) << gate_up.error_message();
  ASSERT_EQ(binding.ops.uploads.back().size(), 2u);
  for (const Tensor& part : binding.ops.uploads.back()) {
    EXPECT_EQ(part.dtype, DType::f8_e4m3);
    EXPECT_FALSE(part.scales.empty());
  }
}

TEST(WeightBinderFp8, WeightsTheUseForbidsArriveDequantized) {
  Binding binding("binder-fp8-dequantized", true);
  const Bound& b = binding.b;
  WeightBinder& bind = binding.bind;
  const Shape kv_b_checkpoint = b.checkpoint.tensor(kKvB).shape;
  auto kv_b = bind.weight(kKvB, kv_b_checkpoint, {.matmul_only = false});
  ASSERT_TRUE(kv_b.ok()) << kv_b.error_message();
  EXPECT_EQ(kv_b->dtype, DType::f32);
  auto expect = dequantize_fp8_blocks(b.checkpoint.tensor(kKvB), b.checkpoint.tensor(kKvB + "_scale_inv"),
                                      *b.config.fp8, kKvB);
  ASSERT_TRUE(expect.ok());
  ASSERT_EQ(static_cast<std::size_t>(kv_b->numel()), expect->size());
  EXPECT_EQ(std::memcmp(kv_b->data, expect->data(), expect->size() * 4), 0);
  // Sliced off a block row: dequantized.
  auto kv_a = bind.weight(kKvA, b.checkpoint.tensor(kKvA).shape, {.row_slice_at = 96});
  ASSERT_TRUE(kv_a.ok()) << kv_a.error_message();
  EXPECT_EQ(kv_a->dtype, DType::f32);
}

TEST(WeightBinderFp8, ABackendWithoutFp8GemmsGetsF32) {
  Binding binding("binder-fp8-cpu", false);
  const Bound& b = binding.b;
  WeightBinder& bind = binding.bind;
  auto kv_a = bind.weight(kKvA, b.checkpoint.tensor(kKvA).shape);
  ASSERT_TRUE(kv_a.ok()) << kv_a.error_message();
  EXPECT_EQ(kv_a->dtype, DType::f32);
  EXPECT_TRUE(kv_a->scales.empty());
  EXPECT_EQ(binding.buffers.size(), 1u);
}

}  // namespace
}  // namespace sluice
