// DeepSeek-V4's forward on the device (model/cuda/deepseek_v4_forward.h)
// against the CPU reference (DeepseekV4Reference, which matches transformers
// to 1e-4), on a make-model checkpoint at V4-Flash's head widths (latent 512
// with 64 rope dims, index heads of 128: the widths the kernels are built
// for) and a narrow, shallow body: 4 layers (sliding, CSA, HCA, CSA; the
// first hash-routed), hidden 64, 4 heads, 8 experts top 2, window 8, CSA
// rate 4, HCA rate 16, blocks of 16 tokens; f32 weights, and DeepSeek's
// formats (FP8 dense linears with FP4 routed experts, or FP8 ones as the -Base
// checkpoints ship them) at hidden, q_lora, o_lora and expert widths of 128,
// which every FP8 kernel takes. The FP8 checkpoints run three ways:
// dequantized by the host to bf16 (session 12's path: FP4 experts only), kept
// FP8 on the device with bf16 activations (Fp8DenseGemm::kernel,
// MoeExpertGemm::grouped: the bf16 path's numbers), and kept FP8 with the
// default FP8 GEMMs (cuBLASLt block-scaled, wgmma e4m3: activations rounded to
// e4m3 per 1x128, held to the reference with those roundings; see
// tests/support/deepseek_v4_device_rounding.h for why those bounds are loose).
// index_topk (32) is at least every
// entry a row sees (76 tokens: 19), so the device's FP8 indexer picks what
// the reference's f32 one picks, and the goldens are exact sets.
//   - Two sequences batched in one step, prefilled in chunks that split CSA
//     and HCA windows and KV blocks, then greedy decode: every step's logits
//     within the bounds (below) of the exact reference and of the reference
//     run with the device's roundings (bf16 GEMM inputs and weights, bf16
//     attention queries and keys: testing::DeviceRoundingKernels), the
//     greedy tokens the exact reference's wherever its pick is not near a tie.
//   - A prefix-cache hit: a sequence whose table starts with the first
//     sequence's two full blocks computes only its tail; its logits are the
//     cold run's (on the device, within the rounded reference's spread:
//     cuBLASLt may sum 18 and 50 rows in other orders; and the rounded
//     reference's).
//   - Through the engine's side (make_model_runner over CudaOps, the
//     registered CUDA runner, generate_sequence): greedy tokens equal the CPU
//     backend's up to the first pick near a tie, their logits within the bound,
//     prefill in chunks that split windows.
//   - upload() refuses widths the kernels are not built for.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/model/cuda/deepseek_v4_device_runner.h"
#include "sluice/model/cuda/deepseek_v4_forward.h"
#include "sluice/backend/float_convert.h"
#include "sluice/model/config.h"
#include "sluice/model/deepseek_v4.h"
#include "sluice/model/deepseek_v4_kv_layout.h"
#include "sluice/model/generate.h"
#include "sluice/model/make_model.h"
#include "sluice/model/model_runner.h"
#include "sluice/model/safetensors.h"
#include "../support/deepseek_v4_device_rounding.h"
#include "../support/tiny_deepseek_v4.h"

namespace sluice {
namespace {

using testing::argmax;
using testing::scaled_error;

constexpr std::int32_t kBlock = 16;
constexpr std::int32_t kNumBlocks = 16;
constexpr std::int32_t kVocab = 320;
// |device - reference| <= bound * max |reference logit| of the row, the
// bounds of testing::DeviceRoundingKernels (twice what the CPU measures,
// model_deepseek_v4_device_rounding_test): against the exact reference, what
// the device's bf16 roundings cost; against the reference with those
// roundings, what one f32 ulp of another summation order costs once they
// amplify it (the rounded reference is that sensitive: 8e-3 with f32 weights,
// 2.3e-2 with FP8 ones). A greedy token must equal the exact reference's
// where its margin is more than twice the bound; nearer a tie either may win.
constexpr float kLogitBound = testing::kDeepseekV4DeviceRoundingBoundF32;  // the engine's f32 checkpoint
using testing::DeepseekV4GoldenWeights;

// One way to run a golden checkpoint on the device.
struct Case {
  DeepseekV4GoldenWeights weights = DeepseekV4GoldenWeights::f32;
  bool keep_quantized = false;  // FP8 / FP4 kept as stored (the runner's way); else the host's f32, rounded to bf16
  cuda::DeepseekV4DeviceOptions options{};
  bool fp8_kv = false;  // fp8_ds_mla latent records (--kv-cache-dtype fp8), on the f32 checkpoint
  bool e4m3() const {
    return keep_quantized && options.fp8_dense_gemm == cuda::Fp8DenseGemm::cublaslt &&
           options.moe_expert_gemm == cuda::MoeExpertGemm::fp8_wgmma;
  }
  testing::DeepseekV4GoldenBounds bounds() const {
    return fp8_kv ? testing::kDeepseekV4DeviceBoundsFp8Kv : testing::deepseek_v4_device_bounds(weights, e4m3());
  }
  std::string name() const {
    std::string n = testing::deepseek_v4_golden_name(weights);
    if (options.attention == cuda::DeepseekV4AttentionKernel::cuda_cores) n += "_cuda_core_attention";
    if (options.attention == cuda::DeepseekV4AttentionKernel::wgmma_two_terms) n += "_two_term_attention";
    if (options.indexer == cuda::DeepseekV4IndexerKernels::f32_pool_cuda_cores) n += "_session17_indexer";
    if (options.indexer == cuda::DeepseekV4IndexerKernels::e4m3_pool_mma) n += "_session18_indexer";
    if (options.indexer == cuda::DeepseekV4IndexerKernels::e4m3_pool_wgmma_tf32_prefill) n += "_tf32_head_sum_indexer";
    if (options.indexer == cuda::DeepseekV4IndexerKernels::e4m3_pool_wgmma_prefill) n += "_fma_head_sum_indexer";
    if (options.indexer == cuda::DeepseekV4IndexerKernels::e4m3_pool_wgmma_tf32_long_chunks &&
        options.tf32_head_sum_min_rows != cuda::DeepseekV4DeviceOptions{}.tf32_head_sum_min_rows)
      n += "_tf32_head_sum_from_" + std::to_string(options.tf32_head_sum_min_rows) + "_rows_indexer";
    if (fp8_kv) n += "_fp8_kv";
    if (weights == DeepseekV4GoldenWeights::f32) return n;
    if (!keep_quantized) return n + "_host_bf16";
    return n + (e4m3() ? "_kept_e4m3" : "_kept_bf16_activations");
  }
};
constexpr cuda::DeepseekV4DeviceOptions kBf16Activations{.fp8_dense_gemm = cuda::Fp8DenseGemm::kernel,
                                                         .moe_expert_gemm = cuda::MoeExpertGemm::grouped};
constexpr cuda::DeepseekV4DeviceOptions kE4m3Activations{};  // the defaults: cuBLASLt, wgmma

std::string scratch(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("sluice-v4-forward-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

MakeModelOptions flash_width_options(const std::string& dir) {
  return testing::deepseek_v4_flash_width_options(dir, kVocab);
}

struct Loaded {
  ModelConfig config;
  cpu::DeepseekV4CpuKernels kernels;
  std::unique_ptr<testing::DeviceRoundingKernels> rounding_kernels;
  std::unique_ptr<DeepseekV4Reference> reference;  // exact (f32), matches transformers
  std::unique_ptr<DeepseekV4Reference> emulated;   // with the device's roundings
  std::unique_ptr<DeepseekV4Reference> quantized;  // keep_quantized: what the device uploads (not run)
};

// `e4m3`: the emulating reference takes the default FP8 GEMMs' roundings;
// `fp8_kv`: its attention's keys as fp8_ds_mla records hold them.
std::unique_ptr<Loaded> load(const std::string& dir, bool e4m3 = false, bool fp8_kv = false) {
  auto loaded = std::make_unique<Loaded>();
  auto config = load_model_config(dir);
  SLUICE_CHECK_MSG(config.ok(), config.error_message());
  loaded->config = *config;
  auto checkpoint = Checkpoint::open(dir);
  SLUICE_CHECK_MSG(checkpoint.ok(), checkpoint.error_message());
  auto reference = DeepseekV4Reference::load(loaded->config, *checkpoint, loaded->kernels);
  SLUICE_CHECK_MSG(reference.ok(), reference.error_message());
  loaded->reference = std::move(*reference);
  loaded->rounding_kernels = e4m3 ? testing::DeviceRoundingKernels::e4m3_activations()
                                  : std::make_unique<testing::DeviceRoundingKernels>();
  if (fp8_kv) loaded->rounding_kernels->set_fp8_kv_records(loaded->config.deepseek_v4->qk_rope_head_dim);
  auto emulated = DeepseekV4Reference::load(loaded->config, *checkpoint, *loaded->rounding_kernels);
  SLUICE_CHECK_MSG(emulated.ok(), emulated.error_message());
  loaded->emulated = std::move(*emulated);
  auto quantized = DeepseekV4Reference::load(loaded->config, *checkpoint, loaded->kernels, {.keep_quantized = true});
  SLUICE_CHECK_MSG(quantized.ok(), quantized.error_message());
  loaded->quantized = std::move(*quantized);
  return loaded;
}

std::vector<TokenId> tokens_of(std::int32_t n, std::int32_t mul, std::int32_t add) {
  std::vector<TokenId> t;
  for (std::int32_t i = 0; i < n; ++i) t.push_back((i * mul + add) % kVocab);
  return t;
}

// One sequence of a step: its table, what it has computed, its new tokens.
struct Part {
  const std::vector<BlockId>* table;
  std::int32_t computed;
  std::vector<TokenId> tokens;
};

StepLayout step_of(const std::vector<Part>& parts) {
  StepLayout step;
  for (const Part& p : parts) {
    step.sequences.push_back({.row_begin = step.num_rows(), .num_rows = static_cast<std::int32_t>(p.tokens.size()),
                              .num_computed_tokens = p.computed, .block_table = *p.table});
    for (std::size_t i = 0; i < p.tokens.size(); ++i) {
      step.token_ids.push_back(p.tokens[i]);
      step.positions.push_back(p.computed + static_cast<std::int32_t>(i));
    }
    step.sample_rows.push_back(step.num_rows() - 1);
  }
  return step;
}

// f32 weights, or DeepSeek's formats, uploaded as the host dequantized them
// or kept as stored (with either kind of FP8 GEMM).
class DeepseekV4DeviceForwardTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    const std::string dir = scratch(std::string("flash-width-") + c.name());
    const Status made = make_model(testing::deepseek_v4_golden_options(dir, kVocab, c.weights));
    ASSERT_TRUE(made.ok()) << made.error_message();
    model_ = load(dir, c.e4m3(), c.fp8_kv);
    // The served formats (bf16 latents, e4m3 index records), but f32 index keys for the
    // session-17 indexer, which reads them.
    DeepseekV4KvFormats formats = c.fp8_kv ? DeepseekV4KvFormats::cuda_fp8() : DeepseekV4KvFormats::cuda();
    if (c.options.indexer == cuda::DeepseekV4IndexerKernels::f32_pool_cuda_cores)
      formats.index_keys = DeepseekV4ValueFormat::f32;
    auto layout = DeepseekV4KvLayout::make(model_->config, kBlock, formats);
    ASSERT_TRUE(layout.ok()) << layout.error_message();
    layout_ = std::move(*layout);
    auto device = cuda::DeepseekV4DeviceForward::upload(c.keep_quantized ? *model_->quantized : *model_->reference,
                                                         *layout_, c.options);
    ASSERT_TRUE(device.ok()) << device.error_message();
    device_ = std::move(*device);
    const auto summary = device_->weight_summary();
    std::printf("[ v4 forward ] %s: %d FP8 linears (%.2f MB), %d bf16 (%.2f MB), %d dequantized on the device, "
                "%d FP4 weights turned FP8, %d FP4 weights inexact in e4m3\n",
                c.name().c_str(), summary.fp8_linears, summary.fp8_bytes / 1e6, summary.bf16_linears,
                summary.bf16_bytes / 1e6, summary.dequantized_on_device, summary.fp4_converted, summary.fp4_inexact);
    if (c.keep_quantized) {
      // Every linear the checkpoint stores FP8 (or FP4) stays FP8 at these widths:
      // per layer wq_a, wq_b, wkv, wo_a, wo_b, the shared expert's two, the routed
      // experts' two; the indexer's wq_b in the 2 CSA layers.
      const std::int32_t layers = model_->config.num_layers;
      EXPECT_EQ(summary.fp8_linears, 9 * layers + 2);
      EXPECT_EQ(summary.dequantized_on_device, 0);
      EXPECT_EQ(summary.fp4_inexact, 0);
      EXPECT_EQ(summary.fp4_converted, c.weights == DeepseekV4GoldenWeights::fp8_fp4_experts ? 2 * layers : 0);
    }
    floats_per_block_ = (layout_->floats_per_block() + kBlock - 1) / kBlock * kBlock;  // whole slots, as the model asks
    const std::size_t bytes = static_cast<std::size_t>(kNumBlocks * floats_per_block_) * sizeof(float);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&blocks_), bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(blocks_, 0xff, bytes), cudaSuccess);  // NaN: a read of an unwritten place shows
    // The fill runs on the legacy stream, which the backend's non-blocking streams do not wait for.
    ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  }
  void TearDown() override { cudaFree(blocks_); }

  cuda::V4PagedBlocks blocks() const {
    return {.data = blocks_, .floats_per_block = floats_per_block_, .num_blocks = kNumBlocks, .block_size = kBlock};
  }
  std::vector<float> run(const std::vector<Part>& parts) {
    auto logits = device_->forward(step_of(parts), blocks(), nullptr);
    EXPECT_TRUE(logits.ok()) << logits.error_message();
    return logits.ok() ? *logits : std::vector<float>(parts.size() * kVocab, NAN);
  }

  std::unique_ptr<Loaded> model_;
  std::optional<DeepseekV4KvLayout> layout_;
  std::unique_ptr<cuda::DeepseekV4DeviceForward> device_;
  std::int64_t floats_per_block_ = 0;
  float* blocks_ = nullptr;
};

TEST_P(DeepseekV4DeviceForwardTest, BatchedChunkedPrefillAndGreedyDecodeMatchTheReference) {
  const std::vector<BlockId> table_a = {5, 2, 9, 0, 7}, table_b = {11, 1, 8, 6};
  const std::vector<TokenId> prompt_a = tokens_of(70, 37, 11), prompt_b = tokens_of(45, 53, 3);
  // Per sequence (A, B): the exact reference's state and the emulating one's.
  const DeepseekV4Reference& ref = *model_->reference;
  const DeepseekV4Reference& emu = *model_->emulated;
  std::vector<DeepseekV4Reference::Sequence> exact = {ref.start_sequence(), ref.start_sequence()};
  std::vector<DeepseekV4Reference::Sequence> emulated = {emu.start_sequence(), emu.start_sequence()};
  const float bound = GetParam().bounds().cost, bound_emulated = GetParam().bounds().spread;
  float worst = 0.0f, worst_emulated = 0.0f;
  int near_ties = 0;
  std::vector<TokenId> next(2);
  std::vector<std::int32_t> done = {0, 0};
  // One step of both sequences: the device's logits against both references.
  auto step = [&](const std::vector<TokenId>& ta, const std::vector<TokenId>& tb, const std::string& what) {
    const std::vector<float> got = run({{&table_a, done[0], ta}, {&table_b, done[1], tb}});
    for (int s = 0; s < 2; ++s) {
      const std::vector<TokenId>& tokens = s == 0 ? ta : tb;
      const std::string where = what + (s == 0 ? " A" : " B");
      auto want = ref.append(exact[s], tokens);
      auto want_emulated = emu.append(emulated[s], tokens);
      ASSERT_TRUE(want.ok() && want_emulated.ok());
      const std::span<const float> mine(got.data() + s * kVocab, kVocab);
      const float e = scaled_error(mine, *want), e_emulated = scaled_error(mine, *want_emulated);
      EXPECT_LE(e, bound) << where;
      EXPECT_LE(e_emulated, bound_emulated) << where;
      worst = std::max(worst, e);
      worst_emulated = std::max(worst_emulated, e_emulated);
      next[s] = argmax(*want);  // both sequences go on with the exact reference's pick
      if (testing::greedy_margin(*want) > 2 * bound) {
        EXPECT_EQ(argmax(mine), next[s]) << where;
      } else {
        ++near_ties;
      }
      done[s] += static_cast<std::int32_t>(tokens.size());
    }
  };
  // Chunks that end mid-window (CSA 4, HCA 16) and mid-block, then the rest.
  step(std::vector<TokenId>(prompt_a.begin(), prompt_a.begin() + 37),
       std::vector<TokenId>(prompt_b.begin(), prompt_b.begin() + 20), "prefill 1");
  step(std::vector<TokenId>(prompt_a.begin() + 37, prompt_a.end()),
       std::vector<TokenId>(prompt_b.begin() + 20, prompt_b.end()), "prefill 2");
  // Greedy decode, both sequences a row each step (A crosses a block at 80).
  for (int i = 0; i < 6; ++i) step({next[0]}, {next[1]}, "decode " + std::to_string(i));
  std::printf("[ v4 forward ] %s: worst max|dlogit| / max|logit| over 8 steps: %.3g against the reference (bound "
              "%.3g), %.3g against it with the device's roundings (bound %.3g); %d of 16 picks near a tie, "
              "not compared\n",
              GetParam().name().c_str(), worst, bound, worst_emulated, bound_emulated, near_ties);
  const cuda::Fp8GemmCounts counts = device_->fp8_gemm_counts();
  if (GetParam().e4m3()) {
    EXPECT_GT(counts.num_cublaslt, 0);  // the prefill steps' dense FP8 linears
    std::printf("[ v4 forward ] cuBLASLt block-scaled GEMMs: %lld ran, %lld refused (%s)\n",
                static_cast<long long>(counts.num_cublaslt), static_cast<long long>(counts.num_refused),
                counts.last_refusal.c_str());
  } else {
    EXPECT_EQ(counts.num_cublaslt, 0);
  }
}

TEST_P(DeepseekV4DeviceForwardTest, PrefixCacheHitMatchesTheColdRun) {
  // A runs 40 tokens; C shares A's first two blocks (32 tokens) and computes
  // its own 18-token tail; D is the cold run of C's 50 tokens.
  const std::vector<BlockId> table_a = {5, 2, 9}, table_c = {5, 2, 12, 13}, table_d = {3, 4, 10, 14};
  std::vector<TokenId> prompt_c = tokens_of(50, 29, 7);
  std::vector<TokenId> prompt_a(prompt_c.begin(), prompt_c.begin() + 32);
  const std::vector<TokenId> a_tail = tokens_of(8, 17, 1);
  prompt_a.insert(prompt_a.end(), a_tail.begin(), a_tail.end());
  (void)run({{&table_a, 0, prompt_a}});
  const std::vector<float> hit = run({{&table_c, 32, std::vector<TokenId>(prompt_c.begin() + 32, prompt_c.end())}});
  const std::vector<float> cold = run({{&table_d, 0, prompt_c}});
  auto cpu = model_->emulated->start_sequence();
  auto want = model_->emulated->append(cpu, prompt_c);
  ASSERT_TRUE(want.ok());
  const float hit_vs_cold = scaled_error(hit, cold);
  const float spread = GetParam().bounds().spread;
  EXPECT_LE(hit_vs_cold, spread);
  EXPECT_LE(scaled_error(cold, *want), spread);
  if (testing::greedy_margin(*want) > 2 * spread) {
    EXPECT_EQ(argmax(hit), argmax(*want));
  }
  std::printf("[ v4 forward ] prefix hit vs cold: %.3g, cold vs the reference with the device's roundings: %.3g\n",
              hit_vs_cold, scaled_error(cold, *want));
}

INSTANTIATE_TEST_SUITE_P(
    Weights, DeepseekV4DeviceForwardTest,
    ::testing::Values(Case{.weights = DeepseekV4GoldenWeights::f32},
                      // Session 17's kernels for the attention and the indexer (the A/B rows of the bench).
                      Case{.weights = DeepseekV4GoldenWeights::f32,
                           .options = {.indexer = cuda::DeepseekV4IndexerKernels::f32_pool_cuda_cores,
                                       .attention = cuda::DeepseekV4AttentionKernel::cuda_cores}},
                      // The wgmma attention's softmax weights as two bf16 terms (the default takes one).
                      Case{.weights = DeepseekV4GoldenWeights::f32,
                           .options = {.attention = cuda::DeepseekV4AttentionKernel::wgmma_two_terms}},
                      // --kv-cache-dtype fp8: the latents and entries as fp8_ds_mla records.
                      Case{.weights = DeepseekV4GoldenWeights::f32, .fp8_kv = true},
                      // Session 18's indexer scores (mma.sync at prefill too).
                      Case{.weights = DeepseekV4GoldenWeights::f32,
                           .options = {.indexer = cuda::DeepseekV4IndexerKernels::e4m3_pool_mma}},
                      // The indexer's heads summed by a tf32 MMA at prefill (session 26).
                      Case{.weights = DeepseekV4GoldenWeights::f32,
                           .options = {.indexer = cuda::DeepseekV4IndexerKernels::e4m3_pool_wgmma_tf32_prefill}},
                      // ... only in steps of >= 58 rows: the batched test's first prefill step (57 rows)
                      // sums on FMAs, its second (58) on the tf32 MMA.
                      Case{.weights = DeepseekV4GoldenWeights::f32,
                           .options = {.indexer = cuda::DeepseekV4IndexerKernels::e4m3_pool_wgmma_tf32_long_chunks,
                                       .tf32_head_sum_min_rows = 58}},
                      Case{.weights = DeepseekV4GoldenWeights::fp8_fp4_experts},
                      Case{.weights = DeepseekV4GoldenWeights::fp8_fp4_experts, .keep_quantized = true,
                           .options = kBf16Activations},
                      Case{.weights = DeepseekV4GoldenWeights::fp8_fp4_experts, .keep_quantized = true,
                           .options = kE4m3Activations},
                      Case{.weights = DeepseekV4GoldenWeights::fp8_fp8_experts, .keep_quantized = true,
                           .options = kBf16Activations},
                      Case{.weights = DeepseekV4GoldenWeights::fp8_fp8_experts, .keep_quantized = true,
                           .options = kE4m3Activations}),
    [](const auto& info) { return info.param.name(); });

TEST(DeepseekV4DeviceForwardEngine, GreedyGenerationOnCudaOpsIsTheCpuBackends) {
  const std::string dir = scratch("engine");
  ASSERT_TRUE(make_model(flash_width_options(dir)).ok());
  register_cuda_deepseek_v4_runner();
  auto cuda_ops = make_cuda_ops({.scratch_bytes = 64LL << 20});
  ASSERT_TRUE(cuda_ops.ok()) << cuda_ops.error_message();
  auto on_cuda = make_model_runner(dir, std::move(*cuda_ops), {.block_size_tokens = kBlock, .num_kv_blocks = 12});
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.error_message();
  auto on_cpu = make_model_runner(dir, make_cpu_ops({.num_threads = 1}), {.block_size_tokens = kBlock, .num_kv_blocks = 12});
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.error_message();
  const std::vector<TokenId> prompt = tokens_of(61, 41, 5);
  const GenerateOptions options{.max_new_tokens = 12, .prefill_chunk_tokens = 23, .return_logits = true};
  auto got = generate_sequence(**on_cuda, prompt, options);
  ASSERT_TRUE(got.ok()) << got.error_message();
  auto want = generate_sequence(**on_cpu, prompt, options);
  ASSERT_TRUE(want.ok()) << want.error_message();
  // Equal tokens, but for a pick within the bound of a tie, after which the sequences part.
  ASSERT_EQ(got->tokens.size(), want->tokens.size());
  ASSERT_EQ(got->logits.size(), want->tokens.size());
  ASSERT_EQ(want->logits.size(), want->tokens.size());
  // Step i's logits within max(kLogitBound, twice what one f32 ulp of noise moves
  // the rounded reference there): step 10 of this generation sits near a flip
  // (tests/support/deepseek_v4_device_rounding.h, kDeepseekV4EngineFlowSpreadF32).
  ASSERT_EQ(got->tokens.size(), testing::kDeepseekV4EngineFlowSpreadF32.size());
  std::size_t compared = 0;
  float worst = 0.0f, worst_of_bound = 0.0f;
  for (; compared < got->tokens.size(); ++compared) {
    const float error = scaled_error(got->logits[compared], want->logits[compared]);
    const float bound = std::max(kLogitBound, 2 * testing::kDeepseekV4EngineFlowSpreadF32[compared]);
    EXPECT_LE(error, bound) << "step " << compared;
    worst = std::max(worst, error);
    worst_of_bound = std::max(worst_of_bound, error / bound);
    if (got->tokens[compared] != want->tokens[compared]) {
      EXPECT_LE(testing::greedy_margin(want->logits[compared]), 2 * kLogitBound) << "token " << compared;
      ++compared;
      break;
    }
  }
  std::printf("[ v4 forward ] engine: %zu of %zu greedy tokens compared (equal up to a near tie), worst "
              "max|dlogit| / max|logit| %.3g (%.2f of its step's bound)\n",
              compared, got->tokens.size(), worst, worst_of_bound);
}

// The runner on an FP8 + FP4-experts checkpoint: loaded with keep_quantized
// (nothing dequantized on the host), CudaOps' default FP8 GEMMs; against the
// CPU backend's first chunk of logits within the e4m3 cost bound, and every
// later logit finite (the e4m3 roundings make these random models chaotic:
// tests/support/deepseek_v4_device_rounding.h).
TEST(DeepseekV4DeviceForwardEngine, RunsAnFp8CheckpointKeptQuantized) {
  const std::string dir = scratch("engine-fp8");
  ASSERT_TRUE(make_model(testing::deepseek_v4_golden_options(dir, kVocab, DeepseekV4GoldenWeights::fp8_fp4_experts)).ok());
  register_cuda_deepseek_v4_runner();
  auto cuda_ops = make_cuda_ops({.scratch_bytes = 64LL << 20});
  ASSERT_TRUE(cuda_ops.ok()) << cuda_ops.error_message();
  auto on_cuda = make_model_runner(dir, std::move(*cuda_ops), {.block_size_tokens = kBlock, .num_kv_blocks = 12});
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.error_message();
  auto on_cpu = make_model_runner(dir, make_cpu_ops({.num_threads = 1}), {.block_size_tokens = kBlock, .num_kv_blocks = 12});
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.error_message();
  const std::vector<TokenId> prompt = tokens_of(61, 41, 5);
  const GenerateOptions options{.max_new_tokens = 4, .prefill_chunk_tokens = 23, .return_logits = true};
  auto got = generate_sequence(**on_cuda, prompt, options);
  ASSERT_TRUE(got.ok()) << got.error_message();
  auto want = generate_sequence(**on_cpu, prompt, options);
  ASSERT_TRUE(want.ok()) << want.error_message();
  ASSERT_FALSE(got->logits.empty());
  const float first = scaled_error(got->logits[0], want->logits[0]);
  EXPECT_LE(first, testing::deepseek_v4_device_bounds(DeepseekV4GoldenWeights::fp8_fp4_experts, true).cost);
  for (const auto& row : got->logits)
    for (float v : row) ASSERT_TRUE(std::isfinite(v));
  std::printf("[ v4 forward ] engine, FP8 + FP4 experts kept quantized: first logits within %.3g of the CPU's\n",
              first);
}

TEST(DeepseekV4DeviceForwardWidths, RefusesWidthsTheKernelsAreNotBuiltFor) {
  const std::string dir = scratch("tiny");
  const Status made = make_model(testing::tiny_deepseek_v4_options(dir, 5));
  ASSERT_TRUE(made.ok()) << made.error_message();
  const std::unique_ptr<Loaded> tiny = load(dir);
  auto layout = DeepseekV4KvLayout::make(tiny->config, kBlock);
  ASSERT_TRUE(layout.ok()) << layout.error_message();
  auto device = cuda::DeepseekV4DeviceForward::upload(*tiny->reference, *layout);
  ASSERT_FALSE(device.ok());
  EXPECT_NE(device.error_message().find("head_dim 512"), std::string::npos) << device.error_message();
}

}  // namespace
}  // namespace sluice
