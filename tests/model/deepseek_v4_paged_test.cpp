// DeepSeek-V4 through the engine's side (issue 18 stage 2): the paged KV
// layout's bytes against a hand derivation for V4-Flash; the transformers
// goldens run through DeepseekV4Model on the CPU backend (generate_sequence:
// prefill whole or in chunks that split compression windows, then one token
// a step), at block sizes of one and two compression windows; and a
// prefix-cache hit (a second sequence whose block table starts with the
// first's full blocks, computing only its tail) lands on exactly the logits of
// the cold run; and on Ops without host V4 kernels, the model runs a
// registered device runner (CUDA's in tests/cuda/deepseek_v4_forward_test.cpp)
// or refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "sluice/common/io.h"
#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/backend/float_convert.h"
#include "sluice/model/deepseek_v4_fp8_ds_mla.h"
#include "sluice/model/deepseek_v4_kv_layout.h"
#include "sluice/model/deepseek_v4_model.h"
#include "sluice/model/generate.h"
#include "../support/throwing_ops.h"
#include "../support/tiny_deepseek_v4.h"
#include "test_models.h"

namespace sluice {
namespace {

using testing::max_abs_diff;

constexpr float kMaxLogitError = 1e-4f;

ModelConfig flash_config() {
  auto config = parse_model_config(testing::deepseek_v4_flash_config_json().dump(), "config.json");
  EXPECT_TRUE(config.ok()) << config.error_message();
  return *config;
}

// V4-Flash: layers 0-1 sliding, 21 CSA layers (2, 4, ..., 42; rate 4), 20 HCA
// layers (3, 5, ..., 41; rate 128); head_dim 512 with 64 rope dims; index keys
// of 128; window 128.
TEST(DeepseekV4KvLayout, FlashBytesMatchTheHandDerivation) {
  const ModelConfig config = flash_config();
  auto layout = DeepseekV4KvLayout::make(config, 128);
  ASSERT_TRUE(layout.ok()) << layout.error_message();

  // CUDA's records: fp8_ds_mla entries 448 e4m3 + 8 scale bytes (7 ue8m0,
  // padded) + 64 rope dims in bf16 = 584 B; index keys 128 e4m3 + an f32 scale = 132 B.
  const DeepseekV4KvRecords fp8 = DeepseekV4KvRecords::cuda_fp8(config);
  EXPECT_EQ(fp8.latent_bytes, 584.0);
  EXPECT_EQ(fp8.index_key_bytes, 132.0);
  const DeepseekV4KvFootprint f = layout->footprint(fp8);
  // The spec's ~3.85 KB: 21 x (584 + 132) / 4 + 20 x 584 / 128 = 3759 + 91.25.
  EXPECT_DOUBLE_EQ(f.compressed_bytes_per_token, 3850.25);
  EXPECT_DOUBLE_EQ(f.window_bytes_per_token, 43.0 * 584);
  EXPECT_DOUBLE_EQ(f.window_ring_bytes_per_sequence, 43.0 * 128 * 584);  // 3,214,336
  // The open entries' pool states in f32, 3 x dim each: CSA 2 (entries w and
  // w + 1) x 512, its indexer 2 x 128; HCA 1 x 512.
  EXPECT_DOUBLE_EQ(f.state_bytes_per_sequence, 4.0 * (21 * (2 * 3 * 512 + 2 * 3 * 128) + 20 * 3 * 512));

  // The CPU's block of 128 tokens, f32: windows 43 x 128 x 512, CSA entries
  // 21 x 32 x 512 and keys 21 x 32 x 128, HCA entries 20 x 1 x 512, the states above.
  EXPECT_EQ(layout->floats_per_block(), 43 * 128 * 512 + 21 * 32 * 512 + 21 * 32 * 128 + 20 * 512 +
                                            21 * (2 * 3 * 512 + 2 * 3 * 128) + 20 * 3 * 512);
}

// A block keeps its last window (128 latents a layer) whatever its size, so
// at 1024 tokens (serve's default) the window costs an eighth of a latent a
// token a layer, and a block is every region once: 25,203 B a token in f32.
TEST(DeepseekV4KvLayout, ALargeBlockKeepsOnlyItsLastWindow) {
  const ModelConfig config = flash_config();
  EXPECT_EQ(deepseek_v4_default_block_size(config), 1024);
  auto layout = DeepseekV4KvLayout::make(config, 1024);
  ASSERT_TRUE(layout.ok()) << layout.error_message();
  EXPECT_EQ(layout->window_slots(), 128);
  EXPECT_DOUBLE_EQ(layout->footprint(DeepseekV4KvRecords::cuda_fp8(config)).window_bytes_per_token,
                   43.0 * 584 * 128 / 1024);
  const std::int64_t floats = 43 * 128 * 512 + 21 * (256 * 512 + 2 * 3 * 512 + 256 * 128 + 2 * 3 * 128) +
                              20 * (8 * 512 + 3 * 512);
  EXPECT_EQ(layout->floats_per_block(), floats);
  EXPECT_EQ(floats * 4 / 1024, 25203);
  // A block smaller than the window keeps every position.
  nlohmann::json wide = testing::deepseek_v4_flash_config_json();
  wide["sliding_window"] = 512;
  auto wide_config = parse_model_config(wide.dump(), "config.json");
  ASSERT_TRUE(wide_config.ok()) << wide_config.error_message();
  auto small = DeepseekV4KvLayout::make(*wide_config, 256);
  ASSERT_TRUE(small.ok()) << small.error_message();
  EXPECT_EQ(small->window_slots(), 256);
}

// CUDA's formats (DeepseekV4KvFormats::cuda()): latents and entries bf16, each
// CSA index key as 128 e4m3 codes then, after all of a block's codes, one f32
// scale: 12,168 B a token at 1024 (the f32 keys took 1,995 more). Every region
// in turn, none overlapping, the codes 16-byte aligned where the block is.
TEST(DeepseekV4KvLayout, CudaFormatsStoreIndexKeysAsE4m3Records) {
  const ModelConfig config = flash_config();
  auto layout = DeepseekV4KvLayout::make(config, 1024, DeepseekV4KvFormats::cuda());
  ASSERT_TRUE(layout.ok()) << layout.error_message();
  EXPECT_EQ(layout->formats(), DeepseekV4KvFormats::cuda());
  const std::int64_t floats = 43 * 128 * 512 / 2 + 21 * (256 * 512 / 2 + 2 * 3 * 512 + 256 * 128 / 4 + 256 + 2 * 3 * 128) +
                              20 * (8 * 512 / 2 + 3 * 512);
  EXPECT_EQ(layout->floats_per_block(), floats);
  EXPECT_EQ(floats * 4 / 1024, 12168);
  std::int64_t next = 0;  // the float after the last region seen
  for (std::size_t l = 0; l < layout->num_layers(); ++l) {
    const DeepseekV4LayerRegion& r = layout->layer(l);
    EXPECT_EQ(r.window_offset, next) << "layer " << l;
    next = r.window_offset + 128 * 512 / 2;
    for (const std::optional<DeepseekV4PoolRegion>* pool : {&r.compressor, &r.indexer}) {
      if (!pool->has_value()) continue;
      const DeepseekV4PoolRegion& p = **pool;
      const std::int64_t entries = 1024 / p.rate;
      EXPECT_EQ(p.entries_offset, next) << "layer " << l;
      if (pool == &r.indexer) {
        EXPECT_EQ(p.entries_format, DeepseekV4ValueFormat::e4m3_scaled);
        EXPECT_EQ(p.entries_offset % 4, 0) << "layer " << l;
        EXPECT_EQ(p.scales_offset, p.entries_offset + entries * 128 / 4) << "layer " << l;
        next = p.scales_offset + entries;
      } else {
        EXPECT_EQ(p.entries_format, DeepseekV4ValueFormat::bf16);
        next = p.entries_offset + entries * 512 / 2;
      }
      EXPECT_EQ(p.state_offset, next) << "layer " << l;
      next = p.state_offset + p.state_floats();
    }
  }
  EXPECT_EQ(next, layout->floats_per_block());

  // The kinds each value takes: latents f32, bf16 or fp8_ds_mla records, index keys f32 or e4m3 records.
  auto refused = DeepseekV4KvLayout::make(config, 1024, {.index_keys = DeepseekV4ValueFormat::bf16});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error_message().find("index keys are f32 or e4m3"), std::string::npos) << refused.error_message();
  refused = DeepseekV4KvLayout::make(config, 1024, {.latents = DeepseekV4ValueFormat::e4m3_scaled});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error_message().find("latents and entries are f32, bf16 or fp8_ds_mla"), std::string::npos)
      << refused.error_message();
}

// The fp8_ds_mla record of a V4-Flash latent (448 nope values, 64 rope):
// 584 bytes, values worked by hand. Group 0 has amax 1: its scale is the
// power of two above 1 / 448, 2^-8 (code 119), so 1 is code 256 x 2^-8 and
// 0.3 (76.8 x 2^-8) rounds to 80 x 2^-8, e4m3's step between 64 and 128
// being 8. A zero group takes the scale of the 1e-4 floor and decodes to 0.
// Rope values are bf16. Then the layout's bytes with these records.
TEST(DeepseekV4KvLayout, Fp8DsMlaRecordsHoldWhatTheFormatSays) {
  const Fp8DsMlaShape shape{.head_dim = 512, .rope_dim = 64};
  ASSERT_TRUE(shape.valid());
  EXPECT_EQ(shape.bytes(), 584);
  std::vector<float> latent(512, 0.0f);
  latent[0] = 1.0f;
  latent[1] = 0.3f;
  latent[2] = -0.3f;
  for (int c = 64; c < 128; ++c) latent[static_cast<std::size_t>(c)] = 1000.0f * (c % 2 == 0 ? 1.0f : -0.5f);
  latent[448] = 1.0f / 3.0f;
  std::vector<std::uint8_t> record(584, 0xaa);
  fp8_ds_mla_encode(shape, latent, record);
  EXPECT_EQ(record[576], 119);            // 2^-8
  EXPECT_EQ(record[578], f32_to_e8m0_ceil(1e-4f / 448.0f));  // a zero group
  EXPECT_EQ(record[583], 0);              // the pad
  std::vector<float> back(512);
  fp8_ds_mla_decode(shape, record, back);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 80.0f / 256.0f);
  EXPECT_EQ(back[2], -80.0f / 256.0f);
  EXPECT_EQ(back[3], 0.0f);
  EXPECT_EQ(back[130], 0.0f);
  // Group 1: amax 1000, scale 4 (1000 / 448 = 2.23 up to 4); 1000 / 4 = 250
  // lies between e4m3's 240 and 256 (step 16), nearer 256: 1024; -500 / 4 = -125 rounds to -128: -512.
  EXPECT_EQ(back[64], 1024.0f);
  EXPECT_EQ(back[65], -512.0f);
  EXPECT_EQ(back[448], bf16_to_f32(f32_to_bf16(1.0f / 3.0f)));
  EXPECT_NE(back[448], 1.0f / 3.0f);

  auto layout = DeepseekV4KvLayout::make(flash_config(), 1024, DeepseekV4KvFormats::cuda_fp8());
  ASSERT_TRUE(layout.ok()) << layout.error_message();
  // Per block: windows 43 x 128 records, CSA 256 entry records + 256 index
  // records of 132 B + the states, HCA 8 entry records + its state.
  const std::int64_t bytes = 43LL * 128 * 584 + 21LL * (256 * 584 + 256 * 132 + 4 * (2 * 3 * 512 + 2 * 3 * 128)) +
                             20LL * (8 * 584 + 4 * 3 * 512);
  EXPECT_EQ(layout->floats_per_block() * 4, bytes);
  EXPECT_EQ(bytes / 1024, 7424);
}

TEST(DeepseekV4KvLayout, RefusesBlocksThatSplitACompressionWindow) {
  const ModelConfig config = flash_config();
  EXPECT_EQ(deepseek_v4_block_alignment(config), 128);
  for (std::int32_t block : {16, 64, 192}) {
    auto layout = DeepseekV4KvLayout::make(config, block);
    ASSERT_FALSE(layout.ok()) << block;
    EXPECT_NE(layout.error_message().find("multiple of 128"), std::string::npos) << layout.error_message();
  }
  EXPECT_TRUE(DeepseekV4KvLayout::make(config, 256).ok());
}

struct GoldenRun {
  std::string name;
  std::vector<testing::GoldenLayout> layouts;
};

class DeepseekV4PagedGoldenTest : public ::testing::TestWithParam<GoldenRun> {};

TEST_P(DeepseekV4PagedGoldenTest, MatchesTransformers) {
  const GoldenRun& run = GetParam();
  const testing::Golden fixture = testing::load_golden_fixture(
      "golden_deepseek_v4_" + run.name + ".json", "paged-deepseek-v4-" + run.name, &testing::make_model_options_from_flags);
  ASSERT_FALSE(fixture.cases.empty());
  const float worst = testing::check_golden_generation(fixture, run.layouts, kMaxLogitError);
  std::printf("%s through the paged model: max |logit - transformers| = %.3g\n", run.name.c_str(), worst);
  RecordProperty("max_abs_logit_error", std::to_string(worst));
}

// Blocks of one compression window (the largest rate) and of two; chunks of
// 37 split windows of every rate.
INSTANTIATE_TEST_SUITE_P(DeepseekV4, DeepseekV4PagedGoldenTest,
                         ::testing::Values(GoldenRun{"all_kinds", {{16, 0}, {32, 37}}},
                                           GoldenRun{"yarn_clamped", {{32, 37}, {64, 0}}},
                                           GoldenRun{"flash_rates", {{128, 37}, {256, 0}}}),
                         [](const auto& info) { return info.param.name; });

SequenceStep step(SequenceId id, const std::vector<TokenId>& tokens, std::int32_t computed, std::int32_t count,
                  const std::vector<BlockId>& table) {
  return SequenceStep{.seq_id = id,
                      .tokens = tokens,
                      .num_prompt_tokens = static_cast<std::int32_t>(tokens.size()),
                      .num_computed_tokens = computed,
                      .num_new_tokens = count,
                      .block_table = table,
                      .sample = true,
                      .return_logits = true};
}

std::vector<float> run(Backend& backend, const SequenceStep& s) {
  Batch batch;
  batch.sequences.push_back(s);
  auto out = backend.execute(batch);
  EXPECT_TRUE(out.ok()) << out.error_message();
  return out.ok() ? out->sequences.front().logits : std::vector<float>{};
}

// The cold run prefills 70 tokens in chunks of 37 (splitting windows) into
// blocks 0-4 and records the logits at every chunk end and at the last
// token. A hit of h whole blocks (h = 1, 3, 4: 16, 48, 64 tokens; the CSA
// entry after each boundary continues the pool state the previous block left)
// is a sequence whose table starts with those blocks and continues in its
// own; it computes only the rest, in one step, and must give the same logits.
TEST(DeepseekV4Paged, PrefixHitEqualsTheColdRun) {
  const std::string dir = testing::scratch_dir("paged-deepseek-v4-prefix");
  ASSERT_TRUE(make_model(testing::tiny_deepseek_v4_options(dir, 7)).ok());
  constexpr std::int32_t kBlock = 16;
  auto backend = testing::cpu_runner(dir, kBlock, 16);
  ASSERT_NE(backend, nullptr);
  std::vector<TokenId> tokens;
  for (int i = 0; i < 70; ++i) tokens.push_back(static_cast<TokenId>((i * 53 + 17) % testing::kTinyDeepseekV4Vocab));
  const std::vector<BlockId> cold_table = {0, 1, 2, 3, 4};
  std::vector<float> cold;
  for (std::int32_t begin = 0; begin < 70; begin += 37) {
    const std::int32_t count = std::min(37, 70 - begin);
    cold = run(*backend, step(1, tokens, begin, count, cold_table));
  }
  ASSERT_EQ(cold.size(), static_cast<std::size_t>(testing::kTinyDeepseekV4Vocab));
  for (std::int32_t hit_blocks : {1, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << hit_blocks << " blocks hit");
    std::vector<BlockId> table(cold_table.begin(), cold_table.begin() + hit_blocks);
    for (BlockId b = 10; table.size() < cold_table.size(); ++b) table.push_back(b);
    const std::int32_t cached = hit_blocks * kBlock;
    const std::vector<float> warm = run(*backend, step(2, tokens, cached, 70 - cached, table));
    EXPECT_EQ(warm, cold);  // exact: the same arithmetic over the same state
  }
  // The hit is state, not luck: a table whose cached blocks hold another
  // prompt's state gives other logits.
  std::vector<TokenId> other = tokens;
  for (int i = 0; i < 48; ++i) other[i] = static_cast<TokenId>((other[i] + 1) % testing::kTinyDeepseekV4Vocab);
  const std::vector<BlockId> other_table = {5, 6, 7, 8, 9};
  run(*backend, step(3, other, 0, 48, other_table));
  const std::vector<BlockId> mixed = {5, 6, 7, 13, 14};
  EXPECT_NE(run(*backend, step(4, tokens, 48, 22, mixed)), cold);
}

TEST(DeepseekV4Paged, RefusesAMisalignedBlockSize) {
  const std::string dir = testing::scratch_dir("paged-deepseek-v4-block");
  ASSERT_TRUE(make_model(testing::tiny_deepseek_v4_options(dir, 7)).ok());
  auto runner = make_model_runner(dir, make_cpu_ops({.num_threads = 1}), {.block_size_tokens = 8, .num_kv_blocks = 8});
  ASSERT_FALSE(runner.ok());
  EXPECT_NE(runner.error_message().find("--block-size 8: deepseek_v4 needs a multiple of 16"), std::string::npos)
      << runner.error_message();
}

// Stands for a backend's device forward (CUDA's: model/cuda/deepseek_v4_device_runner.h):
// the reference's weights, and logits that say how many rows the step had.
class RecordingRunner final : public DeepseekV4DeviceRunner {
 public:
  static inline int made = 0;
  static inline std::int32_t block_size = 0;
  static inline DeepseekV4KvFormats formats;  // the last layout's
  static inline bool offers_fp8 = false;      // kv_formats(kFp8): CUDA's FP8 formats, as its runner's

  static Result<std::unique_ptr<DeepseekV4DeviceRunner>> make(const ModelConfig& config, const Checkpoint& checkpoint,
                                                              Ops& /*ops*/) {
    auto runner = std::make_unique<RecordingRunner>();
    SLUICE_TRY_ASSIGN(reference, DeepseekV4Reference::load(config, checkpoint, runner->kernels_));
    runner->reference_ = std::move(reference);
    ++made;
    return std::unique_ptr<DeepseekV4DeviceRunner>(std::move(runner));
  }
  const DeepseekV4Reference& reference() const override { return *reference_; }
  std::optional<DeepseekV4KvFormats> kv_formats(KvCacheDtype dtype) const override {
    if (dtype == KvCacheDtype::kFp8 && offers_fp8) return DeepseekV4KvFormats::cuda_fp8();
    return DeepseekV4DeviceRunner::kv_formats(dtype);
  }
  Status set_kv_layout(const DeepseekV4KvLayout& layout) override {
    block_size = layout.block_size_tokens();
    formats = layout.formats();
    return Ok{};
  }
  Result<Tensor> forward(Ops& ops, const StepLayout& step) const override {
    Tensor out = ops.scratch({static_cast<std::int64_t>(step.sample_rows.size()), reference_->config().vocab_size},
                             DType::f32);
    std::fill_n(out.as<float>(), out.numel(), static_cast<float>(step.num_rows()));
    return out;
  }

 private:
  cpu::DeepseekV4CpuKernels kernels_;
  std::unique_ptr<DeepseekV4Reference> reference_;
};

// Ops without host V4 kernels (ThrowingOps, unarmed, offers none) refuse the
// model until a backend registers its runner; then every call goes to it,
// while the CPU backend keeps running the reference.
TEST(DeepseekV4Model, RunsARegisteredDeviceRunnerWhereTheOpsHaveNoV4Kernels) {
  const std::string dir = testing::scratch_dir("deepseek-v4-device-runner");
  ASSERT_TRUE(make_model(testing::tiny_deepseek_v4_options(dir, 3)).ok());
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.error_message();
  auto checkpoint = Checkpoint::open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error_message();
  std::atomic<bool> armed{false};
  testing::ThrowingOps ops(armed);
  set_deepseek_v4_device_runner_maker(nullptr);
  auto refused = DeepseekV4Model::load(*config, *checkpoint, ops);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error_message().find("no V4 forward"), std::string::npos) << refused.error_message();

  set_deepseek_v4_device_runner_maker(&RecordingRunner::make);
  auto model = DeepseekV4Model::load(*config, *checkpoint, ops);
  ASSERT_TRUE(model.ok()) << model.error_message();
  EXPECT_EQ(RecordingRunner::made, 1);
  EXPECT_EQ((*model)->config().vocab_size, testing::kTinyDeepseekV4Vocab);
  // A runner with no FP8 layout (the base's kv_formats): --kv-cache-dtype fp8 refused, auto its formats.
  const Status fp8 = (*model)->set_kv_cache_dtype(KvCacheDtype::kFp8);
  ASSERT_FALSE(fp8.ok());
  EXPECT_NE(fp8.error_message().find("no FP8 KV layout"), std::string::npos) << fp8.error_message();
  ASSERT_TRUE((*model)->set_kv_cache_dtype(KvCacheDtype::kAuto).ok());
  ASSERT_TRUE((*model)->set_kv_block_size(32).ok());
  EXPECT_EQ(RecordingRunner::block_size, 32);
  EXPECT_EQ(RecordingRunner::formats, DeepseekV4KvFormats::cpu());
  // A runner with one: the dtype reaches the layout, which checks the records fit this model's
  // latents (16 wide here: no group of 64 nope values).
  RecordingRunner::offers_fp8 = true;
  auto fp8_model = DeepseekV4Model::load(*config, *checkpoint, ops);
  ASSERT_TRUE(fp8_model.ok()) << fp8_model.error_message();
  ASSERT_TRUE((*fp8_model)->set_kv_cache_dtype(KvCacheDtype::kFp8).ok());
  const Status misfit = (*fp8_model)->set_kv_block_size(32);
  ASSERT_FALSE(misfit.ok());
  EXPECT_NE(misfit.error_message().find("fp8_ds_mla records need head_dim"), std::string::npos)
      << misfit.error_message();
  RecordingRunner::offers_fp8 = false;
  StepLayout step;
  step.sequences.push_back({.row_begin = 0, .num_rows = 5, .num_computed_tokens = 0, .block_table = {0}});
  step.token_ids = {1, 2, 3, 4, 5};
  step.positions = {0, 1, 2, 3, 4};
  step.sample_rows = {4};
  auto logits = (*model)->forward(ops, step);
  ASSERT_TRUE(logits.ok()) << logits.error_message();
  EXPECT_EQ(logits->shape, (Shape{1, testing::kTinyDeepseekV4Vocab}));
  EXPECT_EQ(logits->as<float>()[0], 5.0f);

  auto cpu_ops = make_cpu_ops({.num_threads = 1});
  auto on_cpu = DeepseekV4Model::load(*config, *checkpoint, *cpu_ops);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.error_message();
  EXPECT_EQ(RecordingRunner::made, 2);  // the CPU's host kernels win
  const Status cpu_fp8 = (*on_cpu)->set_kv_cache_dtype(KvCacheDtype::kFp8);
  ASSERT_FALSE(cpu_fp8.ok());
  EXPECT_NE(cpu_fp8.error_message().find("keeps its KV cache in f32"), std::string::npos) << cpu_fp8.error_message();
  set_deepseek_v4_device_runner_maker(nullptr);
}

}  // namespace
}  // namespace sluice
