// How far the device forward's bf16 roundings alone move DeepSeek-V4's
// logits, on the CPU: the reference with testing::DeviceRoundingKernels
// against the exact one, on the checkpoint and over the steps of the device
// golden (tests/cuda/deepseek_v4_forward_test.cpp: two sequences prefilled
// in chunks that split CSA / HCA windows, then 6 greedy decode steps). This
// is what justifies that golden's bound against the exact reference: the
// device must land within 1e-3 of the rounded reference, and the rounded
// reference stays within its bound of the exact one, with the same greedy
// tokens where the pick is not near a tie (testing::deepseek_v4_device_bounds
// lists the measures). For the FP8 checkpoints it also measures the device's
// default FP8 GEMMs' roundings (e4m3 activations, DeviceRoundingKernels::
// e4m3_activations).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/model/config.h"
#include "sluice/model/deepseek_v4.h"
#include "sluice/model/safetensors.h"
#include "../support/deepseek_v4_device_rounding.h"

namespace sluice {
namespace {

using testing::argmax;
using testing::scaled_error;

constexpr std::int32_t kVocab = 320;  // the device golden's

std::vector<TokenId> tokens_of(std::int32_t n, std::int32_t mul, std::int32_t add) {
  std::vector<TokenId> t;
  for (std::int32_t i = 0; i < n; ++i) t.push_back((i * mul + add) % kVocab);
  return t;
}

constexpr int kNoiseSeeds = 3;

// The device golden's 8 steps of two sequences (A, B): prompts of 70 and 45
// tokens prefilled in two chunks that split CSA / HCA windows, then 6 greedy
// decode steps on the tokens `step` leaves in `next`.
template <typename Step>
void run_device_golden_steps(Step&& step, const std::vector<TokenId>& next) {
  const std::vector<TokenId> prompt_a = tokens_of(70, 37, 11), prompt_b = tokens_of(45, 53, 3);
  step(std::vector<TokenId>(prompt_a.begin(), prompt_a.begin() + 37),
       std::vector<TokenId>(prompt_b.begin(), prompt_b.begin() + 20), "prefill 1");
  step(std::vector<TokenId>(prompt_a.begin() + 37, prompt_a.end()),
       std::vector<TokenId>(prompt_b.begin() + 20, prompt_b.end()), "prefill 2");
  for (int i = 0; i < 6; ++i) step({next[0]}, {next[1]}, "decode " + std::to_string(i));
}

using Sequences = std::vector<DeepseekV4Reference::Sequence>;

// The noisy copies of an emulation appending `tokens` to sequence `s`: their
// largest distance from its logits `got`, each held to half `bound`.
float noisy_spread(const std::vector<std::unique_ptr<DeepseekV4Reference>>& noisy, std::vector<Sequences>& sequences,
                   int s, const std::vector<TokenId>& tokens, const std::vector<float>& got, float bound,
                   const std::string& where) {
  float worst = 0.0f;
  for (std::size_t i = 0; i < noisy.size(); ++i) {
    auto shaken = noisy[i]->append(sequences[i][static_cast<std::size_t>(s)], tokens);
    EXPECT_TRUE(shaken.ok()) << where;
    if (!shaken.ok()) return INFINITY;
    const float spread = scaled_error(*shaken, got);
    EXPECT_LE(spread, bound / 2) << where << " seed " << i + 1;
    worst = std::max(worst, spread);
  }
  return worst;
}

// The device golden's checkpoints: f32, and DeepSeek's formats (FP8 dense
// linears with FP4 or FP8 routed experts, at the widths of 128 the FP8
// kernels take: testing::deepseek_v4_flash_width_options).
using testing::DeepseekV4GoldenWeights;
class DeepseekV4DeviceRounding : public ::testing::TestWithParam<DeepseekV4GoldenWeights> {};

// Per step of the device golden: the rounded reference against the exact one
// (the roundings' cost), and noisy copies of the rounded one against it (what
// one f32 ulp of other summation orders costs through the roundings: the
// spread the device, which sums in other orders, can show against the
// rounded reference).
TEST_P(DeepseekV4DeviceRounding, CostAndSpreadStayWithinTheDeviceGoldensBounds) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    (std::string("sluice-v4-rounding-") + testing::deepseek_v4_golden_name(GetParam()));
  std::filesystem::remove_all(dir);
  const bool quantized = GetParam() != DeepseekV4GoldenWeights::f32;
  ASSERT_TRUE(make_model(testing::deepseek_v4_golden_options(dir.string(), kVocab, GetParam())).ok());
  auto config = load_model_config(dir.string());
  ASSERT_TRUE(config.ok()) << config.error_message();
  auto checkpoint = Checkpoint::open(dir.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error_message();
  const testing::DeepseekV4GoldenBounds bounds = testing::deepseek_v4_device_bounds(GetParam());
  const testing::DeepseekV4GoldenBounds e4m3_bounds = testing::deepseek_v4_device_bounds(GetParam(), true);
  const float cost_bound = bounds.cost, e4m3_bound = e4m3_bounds.cost;
  cpu::DeepseekV4CpuKernels exact_kernels;
  testing::DeviceRoundingKernels rounding_kernels;
  const std::unique_ptr<testing::DeviceRoundingKernels> e4m3_kernels = testing::DeviceRoundingKernels::e4m3_activations();
  std::vector<std::unique_ptr<testing::DeviceRoundingKernels>> noisy_kernels;
  auto exact = DeepseekV4Reference::load(*config, *checkpoint, exact_kernels);
  auto rounded = DeepseekV4Reference::load(*config, *checkpoint, rounding_kernels);
  auto e4m3 = DeepseekV4Reference::load(*config, *checkpoint, *e4m3_kernels);
  ASSERT_TRUE(exact.ok() && rounded.ok() && e4m3.ok());
  std::vector<std::unique_ptr<DeepseekV4Reference>> noisy, noisy_e4m3;
  for (int seed = 1; seed <= kNoiseSeeds; ++seed) {
    noisy_kernels.push_back(std::make_unique<testing::DeviceRoundingKernels>(seed));
    auto n = DeepseekV4Reference::load(*config, *checkpoint, *noisy_kernels.back());
    ASSERT_TRUE(n.ok());
    noisy.push_back(std::move(*n));
    if (!quantized) continue;
    noisy_kernels.push_back(testing::DeviceRoundingKernels::e4m3_activations(seed));
    auto ne = DeepseekV4Reference::load(*config, *checkpoint, *noisy_kernels.back());
    ASSERT_TRUE(ne.ok());
    noisy_e4m3.push_back(std::move(*ne));
  }
  Sequences e = {(*exact)->start_sequence(), (*exact)->start_sequence()};
  Sequences r = {(*rounded)->start_sequence(), (*rounded)->start_sequence()};
  Sequences q = {(*e4m3)->start_sequence(), (*e4m3)->start_sequence()};
  std::vector<Sequences> z, ze;
  for (const auto& n : noisy) z.push_back({n->start_sequence(), n->start_sequence()});
  for (const auto& n : noisy_e4m3) ze.push_back({n->start_sequence(), n->start_sequence()});
  float worst = 0.0f, worst_spread = 0.0f, worst_e4m3 = 0.0f, worst_e4m3_spread = 0.0f, least_margin = 1.0f;
  std::vector<TokenId> next(2);
  auto step = [&](const std::vector<TokenId>& ta, const std::vector<TokenId>& tb, const std::string& what) {
    for (int s = 0; s < 2; ++s) {
      const std::vector<TokenId>& tokens = s == 0 ? ta : tb;
      const std::string where = what + (s == 0 ? " A" : " B");
      auto want = (*exact)->append(e[s], tokens);
      auto got = (*rounded)->append(r[s], tokens);
      ASSERT_TRUE(want.ok() && got.ok());
      const float err = scaled_error(*got, *want);
      EXPECT_LE(err, cost_bound / 2) << where;
      worst = std::max(worst, err);
      // The FP8 checkpoint with e4m3 activations (the device's default FP8 GEMMs).
      auto got_e4m3 = (*e4m3)->append(q[s], tokens);
      ASSERT_TRUE(got_e4m3.ok());
      if (quantized) {
        const float err_e4m3 = scaled_error(*got_e4m3, *want);
        EXPECT_LE(err_e4m3, e4m3_bound / 2) << where;
        worst_e4m3 = std::max(worst_e4m3, err_e4m3);
        worst_e4m3_spread = std::max(worst_e4m3_spread, noisy_spread(noisy_e4m3, ze, s, tokens, *got_e4m3,
                                                                     e4m3_bounds.spread, where + " e4m3"));
      }
      worst_spread = std::max(worst_spread, noisy_spread(noisy, z, s, tokens, *got, bounds.spread, where));
      next[s] = argmax(*want);
      least_margin = std::min(least_margin, testing::greedy_margin(*want));
      if (testing::greedy_margin(*want) > 2 * cost_bound) {
        EXPECT_EQ(argmax(*got), next[s]) << where;
      }
    }
  };
  run_device_golden_steps(step, next);
  std::printf("[ v4 rounding ] %s over 8 steps, max|dlogit| / max|logit|: the roundings' cost %.3g, the spread of "
              "one f32 ulp of noise through them %.3g (%d seeds); with e4m3 activations: cost %.3g, spread %.3g; "
              "least greedy margin %.3g\n",
              testing::deepseek_v4_golden_name(GetParam()), worst, worst_spread, kNoiseSeeds,
              worst_e4m3, worst_e4m3_spread, least_margin);
}

// The engine golden's generation (a 61-token prompt in chunks of 23, then
// greedy steps on the exact reference's picks) through `exact` and `rounded`
// side by side: the logits of both after the prompt and after each of the
// first steps - 1 tokens. Empty when a step fails.
struct FlowLogits {
  std::vector<std::vector<float>> want, got;  // exact, rounded; one a step
};
FlowLogits engine_flow_logits(DeepseekV4Reference& exact, DeepseekV4Reference& rounded, std::size_t steps) {
  auto e = exact.start_sequence();
  auto r = rounded.start_sequence();
  const std::vector<TokenId> prompt = tokens_of(61, 41, 5);
  std::vector<float> want, got;
  for (std::size_t at = 0; at < prompt.size(); at += 23) {
    const std::vector<TokenId> chunk(prompt.begin() + static_cast<std::ptrdiff_t>(at),
                                     prompt.begin() + static_cast<std::ptrdiff_t>(std::min(prompt.size(), at + 23)));
    auto w = exact.append(e, chunk);
    auto g = rounded.append(r, chunk);
    if (!w.ok() || !g.ok()) return {};
    want = *w;
    got = *g;
  }
  FlowLogits flow;
  for (std::size_t i = 0; i < steps; ++i) {
    flow.want.push_back(want);
    flow.got.push_back(got);
    if (i + 1 == steps) break;
    const TokenId next = argmax(want);
    auto w = exact.append(e, std::vector<TokenId>{next});
    auto g = rounded.append(r, std::vector<TokenId>{next});
    if (!w.ok() || !g.ok()) return {};
    want = *w;
    got = *g;
  }
  return flow;
}

// The device engine golden's generation (GreedyGenerationOnCudaOpsIsTheCpuBackends:
// a 61-token prompt in chunks of 23, then 12 greedy tokens): the rounded
// reference picks the exact one's tokens, within the bound (the least margin
// of a pick is printed: 1.2e-2, nearer a tie than the device golden's bound,
// so that golden compares tokens up to the first pick near a tie).
TEST(DeepseekV4DeviceRoundingGeneration, KeepsTheEngineGoldensGreedyTokens) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sluice-v4-rounding-engine";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(make_model(testing::deepseek_v4_flash_width_options(dir.string(), kVocab)).ok());
  auto config = load_model_config(dir.string());
  auto checkpoint = Checkpoint::open(dir.string());
  ASSERT_TRUE(config.ok() && checkpoint.ok());
  cpu::DeepseekV4CpuKernels exact_kernels;
  testing::DeviceRoundingKernels rounding_kernels;
  auto exact = DeepseekV4Reference::load(*config, *checkpoint, exact_kernels);
  auto rounded = DeepseekV4Reference::load(*config, *checkpoint, rounding_kernels);
  ASSERT_TRUE(exact.ok() && rounded.ok());
  const FlowLogits flow = engine_flow_logits(**exact, **rounded, 12);
  ASSERT_EQ(flow.want.size(), 12u);
  float worst = 0.0f, least_margin = 1.0f;
  for (std::size_t i = 0; i < flow.want.size(); ++i) {
    worst = std::max(worst, scaled_error(flow.got[i], flow.want[i]));
    least_margin = std::min(least_margin, testing::greedy_margin(flow.want[i]));
    ASSERT_EQ(argmax(flow.got[i]), argmax(flow.want[i])) << "token " << i;
  }
  EXPECT_LE(worst, testing::kDeepseekV4DeviceRoundingBoundF32 / 2);
  std::printf("[ v4 rounding ] engine golden's generation: 12 greedy tokens equal, worst %.3g, least margin %.3g\n",
              worst, least_margin);
}

// The same generation through the rounded reference with one f32 ulp of
// noise (6 seeds) against the exact one: each step's largest move stays
// within kDeepseekV4EngineFlowSpreadF32 (the engine golden's per-step
// bounds), and step 10's passes the golden's plain bound: why it has them.
TEST(DeepseekV4DeviceRoundingGeneration, EngineFlowSpreadStaysWithinItsRecord) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sluice-v4-rounding-engine-spread";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(make_model(testing::deepseek_v4_flash_width_options(dir.string(), kVocab)).ok());
  auto config = load_model_config(dir.string());
  auto checkpoint = Checkpoint::open(dir.string());
  ASSERT_TRUE(config.ok() && checkpoint.ok());
  cpu::DeepseekV4CpuKernels exact_kernels;
  auto exact = DeepseekV4Reference::load(*config, *checkpoint, exact_kernels);
  ASSERT_TRUE(exact.ok());
  std::array<float, 12> spread{};
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    testing::DeviceRoundingKernels noisy(seed);
    auto rounded = DeepseekV4Reference::load(*config, *checkpoint, noisy);
    ASSERT_TRUE(rounded.ok());
    const FlowLogits flow = engine_flow_logits(**exact, **rounded, spread.size());
    ASSERT_EQ(flow.want.size(), spread.size()) << "seed " << seed;
    for (std::size_t i = 0; i < spread.size(); ++i)
      spread[i] = std::max(spread[i], scaled_error(flow.got[i], flow.want[i]));
  }
  std::string measured;
  for (std::size_t i = 0; i < spread.size(); ++i) {
    EXPECT_LE(spread[i], testing::kDeepseekV4EngineFlowSpreadF32[i]) << "step " << i;
    measured += fmt::format(" {:.3g}", spread[i]);
  }
  EXPECT_GT(spread[10], testing::kDeepseekV4DeviceRoundingBoundF32);
  std::printf("[ v4 rounding ] engine golden's generation under one ulp of noise, per step:%s\n", measured.c_str());
}

// --kv-cache-dtype fp8 (DeepseekV4KvFormats::cuda_fp8()): the device golden's
// steps on the f32 checkpoint with the attention's keys as fp8_ds_mla records
// hold them, on top of the bf16 roundings: against the exact reference (the
// records' cost) and, with one f32 ulp of noise, against itself (the spread
// the device can show against this emulation; an e4m3 code can flip where a
// value lies near a rounding boundary).
TEST(DeepseekV4DeviceRoundingFp8Kv, CostAndSpreadStayWithinTheirBounds) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sluice-v4-rounding-fp8-kv";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(make_model(testing::deepseek_v4_golden_options(dir.string(), kVocab, DeepseekV4GoldenWeights::f32)).ok());
  auto config = load_model_config(dir.string());
  auto checkpoint = Checkpoint::open(dir.string());
  ASSERT_TRUE(config.ok() && checkpoint.ok());
  const std::int64_t rope_dim = config->deepseek_v4->qk_rope_head_dim;
  cpu::DeepseekV4CpuKernels exact_kernels;
  testing::DeviceRoundingKernels fp8_kernels;
  fp8_kernels.set_fp8_kv_records(rope_dim);
  std::vector<std::unique_ptr<testing::DeviceRoundingKernels>> noisy_kernels;
  auto exact = DeepseekV4Reference::load(*config, *checkpoint, exact_kernels);
  auto fp8 = DeepseekV4Reference::load(*config, *checkpoint, fp8_kernels);
  ASSERT_TRUE(exact.ok() && fp8.ok());
  std::vector<std::unique_ptr<DeepseekV4Reference>> noisy;
  for (int seed = 1; seed <= kNoiseSeeds; ++seed) {
    noisy_kernels.push_back(std::make_unique<testing::DeviceRoundingKernels>(seed));
    noisy_kernels.back()->set_fp8_kv_records(rope_dim);
    auto n = DeepseekV4Reference::load(*config, *checkpoint, *noisy_kernels.back());
    ASSERT_TRUE(n.ok());
    noisy.push_back(std::move(*n));
  }
  const testing::DeepseekV4GoldenBounds bounds = testing::kDeepseekV4DeviceBoundsFp8Kv;
  Sequences e = {(*exact)->start_sequence(), (*exact)->start_sequence()};
  Sequences f = {(*fp8)->start_sequence(), (*fp8)->start_sequence()};
  std::vector<Sequences> z;
  for (const auto& n : noisy) z.push_back({n->start_sequence(), n->start_sequence()});
  float worst = 0.0f, worst_spread = 0.0f;
  std::vector<TokenId> next(2);
  auto step = [&](const std::vector<TokenId>& ta, const std::vector<TokenId>& tb, const std::string& what) {
    for (int s = 0; s < 2; ++s) {
      const std::vector<TokenId>& tokens = s == 0 ? ta : tb;
      const std::string where = what + (s == 0 ? " A" : " B");
      auto want = (*exact)->append(e[s], tokens);
      auto got = (*fp8)->append(f[s], tokens);
      ASSERT_TRUE(want.ok() && got.ok());
      const float err = scaled_error(*got, *want);
      EXPECT_LE(err, bounds.cost / 2) << where;
      worst = std::max(worst, err);
      worst_spread = std::max(worst_spread, noisy_spread(noisy, z, s, tokens, *got, bounds.spread, where));
      next[s] = argmax(*want);
      if (testing::greedy_margin(*want) > 2 * bounds.cost) {
        EXPECT_EQ(argmax(*got), next[s]) << where;
      }
    }
  };
  run_device_golden_steps(step, next);
  std::printf("[ v4 rounding ] f32 with fp8_ds_mla KV records over 8 steps, max|dlogit| / max|logit|: cost %.3g, "
              "spread of one f32 ulp of noise %.3g (%d seeds)\n",
              worst, worst_spread, kNoiseSeeds);
}

INSTANTIATE_TEST_SUITE_P(Weights, DeepseekV4DeviceRounding,
                         ::testing::Values(DeepseekV4GoldenWeights::f32, DeepseekV4GoldenWeights::fp8_fp4_experts,
                                           DeepseekV4GoldenWeights::fp8_fp8_experts),
                         [](const auto& info) { return std::string(testing::deepseek_v4_golden_name(info.param)); });

}  // namespace
}  // namespace sluice

