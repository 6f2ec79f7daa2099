// Helpers for tests that need a tiny random-weight model on disk.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sluice/backend/batch.h"
#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/model/deepseek_v4.h"
#include "sluice/model/generate.h"
#include "sluice/model/model_runner.h"
#include "sluice/common/io.h"
#include "sluice/model/make_model.h"
#include "../support/deepseek_v4_flash_config.h"

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

// MakeModelOptions from `sluice make-model` flags without their dashes, as
// tools/reference/golden_deepseek_v3_models.json spells them. An unknown flag
// fails the test.
// The make-model flags of --arch deepseek_v4 (those it shares with
// deepseek_v3 set the V4 shape); false if `flag` is not one of them.
inline bool make_v4_flag(DeepseekV4Shape& v4, const std::string& flag, const nlohmann::json& value) {
  if (flag == "q-lora-rank") v4.q_lora_rank = value;
  else if (flag == "qk-rope-head-dim") v4.qk_rope_head_dim = value;
  else if (flag == "o-groups") v4.o_groups = value;
  else if (flag == "o-lora-rank") v4.o_lora_rank = value;
  else if (flag == "layer-types") {
    const std::string letters = value;
    EXPECT_LT(letters.size(), v4.layer_types.size());
    std::copy_n(letters.begin(), std::min(letters.size(), v4.layer_types.size() - 1), v4.layer_types.begin());
  }
  else if (flag == "csa-rate") v4.csa_compress_rate = value;
  else if (flag == "hca-rate") v4.hca_compress_rate = value;
  else if (flag == "sliding-window") v4.sliding_window = value;
  else if (flag == "index-heads") v4.index_n_heads = value;
  else if (flag == "index-head-dim") v4.index_head_dim = value;
  else if (flag == "index-topk") v4.index_topk = value;
  else if (flag == "hc-mult") v4.hc_mult = value;
  else if (flag == "sinkhorn-iters") v4.hc_sinkhorn_iters = value;
  else if (flag == "hash-layers") v4.num_hash_layers = value;
  else if (flag == "experts") v4.n_routed_experts = value;
  else if (flag == "experts-per-token") v4.num_experts_per_tok = value;
  else if (flag == "moe-intermediate") v4.moe_intermediate_size = value;
  else if (flag == "routed-scale") v4.routed_scaling_factor = value;
  else if (flag == "swiglu-limit") v4.swiglu_limit = value;
  else if (flag == "rope-theta") v4.rope_theta = value;
  else if (flag == "compress-rope-theta") v4.compress_rope_theta = value;
  else if (flag == "yarn-factor") v4.yarn_factor = value;
  else if (flag == "mtp-layers") v4.mtp_layers = value;
  else return false;
  return true;
}

inline MakeModelOptions make_model_options_from_flags(const nlohmann::json& flags, const std::string& out_dir) {
  MakeModelOptions o;
  o.out_dir = out_dir;
  DeepseekV3Shape& d = o.deepseek_v3;
  DeepseekV4Shape& v4 = o.deepseek_v4;
  if (flags.contains("arch")) o.architecture = *parse_architecture(flags.at("arch").get<std::string>());
  const bool is_v4 = o.architecture == Architecture::deepseek_v4;
  for (const auto& [flag, value] : flags.items()) {
    if (flag == "arch") continue;
    if (is_v4 && make_v4_flag(v4, flag, value)) continue;
    if (flag == "layers") o.num_layers = value;
    else if (flag == "hidden") o.hidden_size = value;
    else if (flag == "heads") o.num_heads = value;
    else if (flag == "kv-heads") o.num_kv_heads = value;
    else if (flag == "intermediate") o.intermediate_size = value;
    else if (flag == "vocab") o.vocab_size = value;
    else if (flag == "head-dim") o.head_dim = value;
    else if (flag == "seed") o.seed = value;
    else if (flag == "max-position") o.max_position_embeddings = value;
    else if (flag == "shards") o.num_shards = value;
    else if (flag == "dtype")
      o.dtype = value == "f32" ? DType::f32 : value == "bf16" ? DType::bf16 : DType::f8_e4m3;
    else if (flag == "q-lora-rank") d.q_lora_rank = value;
    else if (flag == "kv-lora-rank") d.kv_lora_rank = value;
    else if (flag == "qk-nope-head-dim") d.qk_nope_head_dim = value;
    else if (flag == "qk-rope-head-dim") d.qk_rope_head_dim = value;
    else if (flag == "v-head-dim") d.v_head_dim = value;
    else if (flag == "experts") d.n_routed_experts = value;
    else if (flag == "experts-per-token") d.num_experts_per_tok = value;
    else if (flag == "shared-experts") d.n_shared_experts = value;
    else if (flag == "moe-intermediate") d.moe_intermediate_size = value;
    else if (flag == "dense-layers") d.first_k_dense_replace = value;
    else if (flag == "expert-groups") d.n_group = value;
    else if (flag == "topk-groups") d.topk_group = value;
    else if (flag == "routed-scale") d.routed_scaling_factor = value;
    else if (flag == "yarn-factor") d.yarn_factor = value;
    else if (flag == "yarn-mscale") d.yarn_mscale = value;
    else if (flag == "yarn-mscale-all-dim") d.yarn_mscale_all_dim = value;
    else if (flag == "mtp-layers") d.mtp_layers = value;
    else ADD_FAILURE() << "unknown make-model flag '" << flag << "'";
  }
  return o;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

// A ModelRunner on two CPU threads with exactly num_blocks KV blocks; null
// (after a test failure) if the model does not load. `fp8` says what an FP8
// checkpoint's GEMMs do with their activations (CpuOpsOptions).
inline std::unique_ptr<Backend> cpu_runner(const std::string& dir, std::int32_t block_size, std::int32_t num_blocks,
                                           CpuFp8Activations fp8 = CpuFp8Activations::f32,
                                           std::int64_t fp8_dense_unquantized_max_rows = 0) {
  auto backend = make_model_runner(dir,
                                   make_cpu_ops({.num_threads = 2,
                                                 .fp8_activations = fp8,
                                                 .fp8_dense_unquantized_max_rows = fp8_dense_unquantized_max_rows}),
                                   {.block_size_tokens = block_size, .num_kv_blocks = num_blocks});
  EXPECT_TRUE(backend.ok()) << backend.error_message();
  return backend.ok() ? std::move(backend).value() : nullptr;
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

// Reads tests/fixtures/<file> and rebuilds its model ("make_model", read by
// `options`) in scratch_dir(scratch_name).
inline Golden load_golden_fixture(const std::string& file, const std::string& scratch_name,
                                  MakeModelOptions (*options)(const nlohmann::json&, const std::string&)) {
  auto text = read_file(std::string(SLUICE_SOURCE_DIR) + "/tests/fixtures/" + file);
  EXPECT_TRUE(text.ok()) << text.error_message();
  if (!text.ok()) return {};
  const auto fixture = nlohmann::json::parse(text.value());
  Golden golden;
  golden.model_dir = scratch_dir(scratch_name);
  auto status = make_model(options(fixture.at("make_model"), golden.model_dir));
  EXPECT_TRUE(status.ok()) << status.error_message();
  for (const auto& c : fixture.at("cases"))
    golden.cases.push_back({c.at("prompt"), c.at("prompt_logits"), c.at("greedy_tokens"), c.at("final_logits")});
  return golden;
}

// tests/fixtures/golden_<arch>.json (tools/reference/golden.py).
inline Golden load_golden(const std::string& arch, const std::string& scratch_name) {
  return load_golden_fixture("golden_" + arch + ".json", scratch_name, &make_model_options);
}

// One way of running a golden case through a backend.
struct GoldenLayout {
  std::int32_t block_size_tokens = 16;
  std::int32_t prefill_chunk_tokens = 0;  // 0 = the whole prompt in one step
};

// Generates each case's 32 greedy tokens on a fresh CPU runner per layout
// (generate_sequence: the prefill, then one token a step): the tokens must be
// the golden's, the logits after the prompt and at the last step within
// max_error. Returns the largest error seen.
inline float check_golden_generation(const Golden& fixture, std::span<const GoldenLayout> layouts, float max_error) {
  float worst = 0.0f;
  for (const GoldenLayout& layout : layouts) {
    for (const GoldenCase& c : fixture.cases) {
      SCOPED_TRACE(::testing::Message() << "block " << layout.block_size_tokens << " chunk "
                                        << layout.prefill_chunk_tokens << " prompt of " << c.prompt.size());
      const auto num_blocks = static_cast<std::int32_t>((c.prompt.size() + 32) / layout.block_size_tokens + 1);
      auto backend = cpu_runner(fixture.model_dir, layout.block_size_tokens, num_blocks);
      if (backend == nullptr) return worst;
      auto result = generate_sequence(*backend, c.prompt,
                                      {.max_new_tokens = 32,
                                       .prefill_chunk_tokens = layout.prefill_chunk_tokens,
                                       .return_logits = true});
      EXPECT_TRUE(result.ok()) << result.error_message();
      if (!result.ok()) return worst;
      EXPECT_EQ(result->tokens, c.greedy_tokens);
      const float prompt_error = max_abs_diff(result->logits.front(), c.prompt_logits);
      const float final_error = max_abs_diff(result->logits.back(), c.final_logits);
      EXPECT_LE(prompt_error, max_error);
      EXPECT_LE(final_error, max_error);
      worst = std::max({worst, prompt_error, final_error});
    }
  }
  return worst;
}

// tests/fixtures/golden_deepseek_v3_<name>.json (tools/reference/golden_deepseek_v3.py).
inline Golden load_deepseek_v3_golden(const std::string& name, const std::string& scratch_name) {
  return load_golden_fixture("golden_deepseek_v3_" + name + ".json", scratch_name, &make_model_options_from_flags);
}

// The tiny DeepSeek-V3 models' shapes (tools/reference/golden_deepseek_v3_models.json), by name.
inline MakeModelOptions deepseek_v3_model_options(const std::string& name, const std::string& dir) {
  auto text = read_file(std::string(SLUICE_SOURCE_DIR) + "/tools/reference/golden_deepseek_v3_models.json");
  EXPECT_TRUE(text.ok()) << text.error_message();
  const auto spec = nlohmann::json::parse(text.value());
  return make_model_options_from_flags(spec.at("models").at(name).at("make_model"), dir);
}

// The FP8 DeepSeek-V3 checkpoint of the FP8 goldens (CPU and CUDA): every
// GEMM dimension a multiple of 128, so each has whole 128x128 weight blocks and
// 1x128 activation groups; 3 layers (one dense, two MoE of 8 experts top 2
// with a shared expert), written to `dir`.
inline MakeModelOptions deepseek_v3_fp8_model_options(const std::string& dir) {
  MakeModelOptions options;
  options.architecture = Architecture::deepseek_v3;
  options.out_dir = dir;
  options.dtype = DType::f8_e4m3;
  options.num_layers = 3;
  options.hidden_size = 256;
  options.num_heads = 4;
  options.intermediate_size = 512;
  options.vocab_size = 512;
  options.max_position_embeddings = 2048;
  options.seed = 31;
  options.deepseek_v3 = {.q_lora_rank = 128, .kv_lora_rank = 128, .qk_nope_head_dim = 32, .qk_rope_head_dim = 16,
                         .v_head_dim = 32, .n_routed_experts = 8, .num_experts_per_tok = 2, .n_shared_experts = 1,
                         .moe_intermediate_size = 128, .first_k_dense_replace = 1, .n_group = 4, .topk_group = 2,
                         .routed_scaling_factor = 2.5f};
  return options;
}

// The prompt of `tokens` tokens the FP8 goldens run (vocab 512).
inline std::vector<TokenId> deepseek_v3_fp8_prompt(std::int32_t tokens) {
  std::vector<TokenId> prompt(static_cast<std::size_t>(tokens));
  for (std::int32_t i = 0; i < tokens; ++i) prompt[static_cast<std::size_t>(i)] = (i * 37 + 11) % 512;
  return prompt;
}

// Relative L2 distance ||got - ref|| / ||ref|| of two logit rows.
inline double relative_logit_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    const double d = std::isfinite(got[i]) ? double(got[i]) - ref[i] : INFINITY;
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// That model made in scratch_dir(scratch); returns its directory.
inline std::string make_deepseek_v3_model(const std::string& name, const std::string& scratch) {
  const std::string dir = scratch_dir(scratch);
  auto status = make_model(deepseek_v3_model_options(name, dir));
  EXPECT_TRUE(status.ok()) << status.error_message();
  return dir;
}

// The DeepSeek-V4 CPU reference of the checkpoint in `dir`, with the kernels
// it runs on (the model keeps a reference to them).
struct DeepseekV4OnCpu {
  cpu::DeepseekV4CpuKernels kernels;
  std::unique_ptr<DeepseekV4Reference> model;
};
inline Result<std::unique_ptr<DeepseekV4OnCpu>> load_deepseek_v4_on_cpu(const std::string& dir) {
  SLUICE_TRY_ASSIGN(config, load_model_config(dir));
  SLUICE_TRY_ASSIGN(checkpoint, Checkpoint::open(dir));
  auto loaded = std::make_unique<DeepseekV4OnCpu>();
  SLUICE_TRY_ASSIGN(model, DeepseekV4Reference::load(config, checkpoint, loaded->kernels));
  loaded->model = std::move(model);
  return loaded;
}

// Blocks to hold every prompt of the fixture and its 32 generated tokens, at once.
inline std::int32_t num_blocks_for(const Golden& golden, std::int32_t block_size) {
  std::size_t blocks = 0;
  for (const GoldenCase& c : golden.cases) blocks += (c.prompt.size() + 32 + block_size - 1) / block_size;
  return static_cast<std::int32_t>(blocks);
}

}  // namespace sluice::testing
