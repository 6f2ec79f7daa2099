// DeepSeek-V3 on the simulator: make_deepseek_v3_profile's FLOPs and bytes at
// h200_sluice_cuda_deepseek_v3()'s efficiencies against the V3 kernels
// measured on the H200 at full width (128 heads, latent 512 + rope 64, 256
// experts top-8, moe_intermediate 2048; docs/benchmarks.md S9-C1, S12,
// S26-2/3). Each efficiency came from one of these rows, so what they check is
// the accounting around it: which form a step's attention runs in (MLA's
// decompressed chunk form against decode's absorbed one, the K/V
// decompression counted), what bounds it (tensor work at 128 heads, the latent
// stream at TP8's 16), and which terms a layer's parts land in. The whole
// truncated model served on the H200 (S36-2) checks their sum, last.
#include <gtest/gtest.h>

#include <cstdio>

#include "../support/deepseek_v3_profile_shape.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/roofline_cost_model.h"

namespace sluice::sim {
namespace {

// DeepSeek-V3's published shape, `layers` MoE layers deep (no dense layer).
DeepseekV3ProfileShape v3_shape(std::int32_t layers) { return testing::deepseek_v3_shape(layers, 0); }

StepShape decode(int batch, std::int32_t context) {
  StepShape s;
  for (int i = 0; i < batch; ++i) s.sequences.push_back({.num_new_tokens = 1, .num_computed_tokens = context - 1});
  return s;
}
StepShape prompt(std::int32_t rows) { return StepShape{{{.num_new_tokens = rows, .num_computed_tokens = 0}}}; }

// The routed experts of one MoE layer alone: no attention, no dense weights, no head.
ModelProfile experts_alone() {
  ModelProfile p = make_deepseek_v3_profile(v3_shape(1));
  LayerGroup& g = p.layer_groups.at(0);
  g.dense_params = 0;
  g.dense_weight_bytes = 0;
  g.attention = AttentionCost{};
  p.head_params = 0;
  p.embedding_head_bytes = 0;
  p.replicated_weight_bytes = 0;
  p.kv_bytes_per_token = 0;
  return p;
}

// Measured on the H200.
constexpr double kMlaPrefill8kMs = 5.4;     // S9-C1: the MLA op through cuDNN, decompression included
constexpr double kMlaPrefill32kMs = 81.8;   // the same at 32k
constexpr double kMlaDecode128Ms = 0.411;   // S26-2/3: 64 x 8k, 128 heads, 1.39-1.55 TB/s of latent
constexpr double kMlaDecode16Ms = 0.266;    // S26-3: 64 x 8k, 16 heads (TP8's share), 2.21-2.34 TB/s
// S36-1: the MoE layer at 4,096 tokens with x in slot order, routing included
// (4.450 and 4.541 ms in two rounds).
constexpr double kMoePrefill4096Ms = 4.50;

TEST(DeepseekV3Cost, MlaChunksRunTheDecompressedFormAndDecodesTheAbsorbedOne) {
  const RooflineCostModel model(make_deepseek_v3_profile(v3_shape(1)), h200_sluice_cuda_deepseek_v3(),
                                Parallelism{});
  const double prefill8k = model.predict(prompt(8192)).attention_ms;
  const double prefill32k = model.predict(prompt(32768)).attention_ms;
  EXPECT_NEAR(prefill8k / kMlaPrefill8kMs, 1.0, 0.10) << prefill8k;
  EXPECT_NEAR(prefill32k / kMlaPrefill32kMs, 1.0, 0.10) << prefill32k;
  // One GPU's 128 heads: the absorbed MQA does 242 flop a latent byte, so
  // the tensor work bounds it, not the latent stream.
  const StepCost decode128 = model.predict(decode(64, 8192));
  EXPECT_FALSE(decode128.attention_memory_bound);
  EXPECT_NEAR(decode128.attention_ms / kMlaDecode128Ms, 1.0, 0.10) << decode128.attention_ms;
  std::printf("[ v3 sim ] MLA prefill 8k %.2f / %.2f ms, 32k %.1f / %.1f, decode 64 x 8k at 128 heads %.3f / %.3f "
              "(predicted / measured)\n",
              prefill8k, kMlaPrefill8kMs, prefill32k, kMlaPrefill32kMs, decode128.attention_ms, kMlaDecode128Ms);
}

// Under TP8 a GPU holds 16 heads but reads every latent (one latent for all heads).
TEST(DeepseekV3Cost, SixteenHeadsAGpuAreBoundByTheLatentStream) {
  const RooflineCostModel model(make_deepseek_v3_profile(v3_shape(1)), h200_sluice_cuda_deepseek_v3(),
                                Parallelism{.num_gpus = 8, .tensor_parallel = 8});
  const StepCost c = model.predict(decode(64, 8192));
  EXPECT_TRUE(c.attention_memory_bound);
  EXPECT_NEAR(c.kv_bytes_per_gpu, 64.0 * 8192 * 576 * 2, 64.0 * 576 * 2 * 2) << "every latent, on every GPU";
  EXPECT_NEAR(c.attention_ms / kMlaDecode16Ms, 1.0, 0.10) << c.attention_ms;
}

TEST(DeepseekV3Cost, TheExpertsOfAPrefillAreBoundByTheirMeasuredRate) {
  const RooflineCostModel model(experts_alone(), h200_sluice_cuda_deepseek_v3(), Parallelism{});
  const StepCost c = model.predict(prompt(4096));
  EXPECT_FALSE(c.gemm_memory_bound);
  EXPECT_NEAR(c.gemm_ms / kMoePrefill4096Ms, 1.0, 0.10) << c.gemm_ms;
  // At batch 64 the touched experts' bytes bound it instead.
  EXPECT_TRUE(model.predict(decode(64, 8192)).gemm_memory_bound);
}

// The whole truncated model served on the H200 (S36-2: 3 dense + 2 MoE layers,
// full width, random FP8, `sluice serve --device cuda`): decode batch 1 at ~1k
// context TPOT p50 1.99 ms, and 8k-token prompts one at a time, TTFT p50 94.1 ms.
// Unlike the rows above, no factor was read off these: they check the sum.
constexpr double kServedDecode1Ms = 1.99;
constexpr double kServedPrefill8kMs = 94.1;

TEST(DeepseekV3Cost, TheServedTruncatedModelWithinFifteenPercent) {
  const RooflineCostModel model(make_deepseek_v3_profile(testing::deepseek_v3_shape(5, 3)),
                                h200_sluice_cuda_deepseek_v3(), Parallelism{});
  const double decode1 = model.predict(decode(1, 1024 + 64)).total_ms();
  // The server ran each prompt as chunks of 5,120 and 3,072 tokens (--max-step-ms 50, S35).
  const StepShape first{{{.num_new_tokens = 5120, .num_computed_tokens = 0}}};
  const StepShape second{{{.num_new_tokens = 3072, .num_computed_tokens = 5120}}};
  const double prefill8k = model.predict(first).total_ms() + model.predict(second).total_ms();
  std::printf("[ v3 sim ] served 3 + 2 layers: decode b1 %.2f / %.2f ms, prefill 8k %.1f / %.1f ms "
              "(predicted / measured)\n",
              decode1, kServedDecode1Ms, prefill8k, kServedPrefill8kMs);
  EXPECT_NEAR(decode1 / kServedDecode1Ms, 1.0, 0.15) << decode1;
  EXPECT_NEAR(prefill8k / kServedPrefill8kMs, 1.0, 0.15) << prefill8k;
}

// What the server and `sluice calibrate` price a V3 checkpoint with.
TEST(DeepseekV3Cost, ServingPicksTheV3Spec) {
  EXPECT_EQ(sluice_cuda_hardware(make_deepseek_v3_profile(v3_shape(4))).name, h200_sluice_cuda_deepseek_v3().name);
  EXPECT_EQ(sluice_cuda_hardware(*find_profile("llama-3-8b")).name, h200_sluice_cuda().name);
}

}  // namespace
}  // namespace sluice::sim
