// DeepSeek-V4 served by the engine on the CPU backend (issue 18 stage 2):
// requests that share a prefix crossing several blocks and compression
// windows hit the prefix cache, and one whose prefix comes back from the
// host KV tier, and they generate the same tokens and log-probabilities (top
// 5 included) as the same prompts run cold; several requests batched in one
// step equal each run alone. The simulator serves it too.
#include <gtest/gtest.h>

#include <filesystem>

#include "../support/tiny_deepseek_v4.h"
#include "engine_test_support.h"
#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/common/rng.h"
#include "sluice/engine/engine.h"
#include "sluice/model/make_model.h"
#include "sluice/model/model_runner.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/sim_backend.h"

namespace sluice {
namespace {

using testing::Generated;
using testing::run_one_after_another;

constexpr std::int32_t kVocab = testing::kTinyDeepseekV4Vocab;
constexpr std::int32_t kBlock = 16;  // the HCA rate: every block boundary is a window boundary
constexpr std::int32_t kNewTokens = 10;

std::string tiny_v4_dir() {
  static const std::string dir = [] {
    const std::string d = std::string(SLUICE_BINARY_DIR) + "/test-scratch/engine-deepseek-v4";
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    const Status s = make_model(testing::tiny_deepseek_v4_options(d, 19));
    EXPECT_TRUE(s.ok()) << s.error_message();
    return d;
  }();
  return dir;
}

std::unique_ptr<Backend> cpu_backend(std::int32_t num_kv_blocks) {
  auto backend = make_model_runner(tiny_v4_dir(), make_cpu_ops({.num_threads = 2}),
                                   {.block_size_tokens = kBlock, .num_kv_blocks = num_kv_blocks});
  EXPECT_TRUE(backend.ok()) << backend.error_message();
  return std::move(backend).value();
}

std::vector<TokenId> random_tokens(SplitMix64& rng, int n) {
  std::vector<TokenId> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<TokenId>(rng.next() % kVocab));
  return t;
}

EngineConfig config(bool prefix_caching) {
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 24;  // prefills in chunks that split windows
  c.enable_prefix_caching = prefix_caching;
  c.clock = ClockMode::kVirtual;
  c.kv_reserve_fraction = 0.0;
  return c;
}

// The last prompt alone on a fresh engine without prefix caching.
Generated cold_run(const std::vector<TokenId>& prompt) {
  Engine cold(cpu_backend(64), nullptr, config(/*prefix_caching=*/false));
  return run_one_after_another(cold, {prompt}, kNewTokens, /*num_top_logprobs=*/5, /*ignore_eos=*/true);
}

TEST(DeepseekV4OnEngine, PrefixHitEqualsColdRun) {
  SplitMix64 rng(3);
  const std::vector<TokenId> shared = random_tokens(rng, 3 * kBlock + 5);  // 3 whole blocks, 12 CSA windows, 3 HCA
  std::vector<TokenId> first = shared, second = shared;
  for (TokenId t : random_tokens(rng, 9)) first.push_back(t);
  for (TokenId t : random_tokens(rng, 13)) second.push_back(t);

  Engine warm(cpu_backend(64), nullptr, config(/*prefix_caching=*/true));
  const Generated hit = run_one_after_another(warm, {first, second}, kNewTokens, 5, /*ignore_eos=*/true);
  EXPECT_EQ(warm.stats().prefix_cache_hit_tokens, 3 * kBlock);
  ASSERT_EQ(hit.tokens.size(), static_cast<std::size_t>(kNewTokens));
  EXPECT_EQ(hit, cold_run(second));
}

TEST(DeepseekV4OnEngine, HostTierHitEqualsColdRun) {
  SplitMix64 rng(4);
  const std::vector<TokenId> shared = random_tokens(rng, 2 * kBlock + 3);
  std::vector<TokenId> first = shared, last = shared;
  for (TokenId t : random_tokens(rng, 5)) first.push_back(t);
  for (TokenId t : random_tokens(rng, 7)) last.push_back(t);
  // Fillers push the shared prefix off the 12-block device pool into the host tier.
  const std::vector<std::vector<TokenId>> prompts = {first, random_tokens(rng, 60), random_tokens(rng, 60), last};

  EngineConfig c = config(/*prefix_caching=*/true);
  c.max_num_seqs = 1;
  std::unique_ptr<Backend> backend = cpu_backend(12);
  ASSERT_GT(backend->info().kv_bytes_per_block, 0) << "the CPU backend offers a host tier";
  c.kv_offloading_bytes = 32 * backend->info().kv_bytes_per_block;
  Engine tiered(std::move(backend), nullptr, c);
  const Generated warm = run_one_after_another(tiered, prompts, kNewTokens, 5, /*ignore_eos=*/true);
  EXPECT_GE(tiered.stats().host_cache_hit_tokens, 2 * kBlock);
  EXPECT_EQ(warm, cold_run(last));
}

// Four requests in the same steps (prefills chunked beside decodes) against
// each alone: a sequence's rows never read another's state.
TEST(DeepseekV4OnEngine, BatchedEqualsAlone) {
  SplitMix64 rng(5);
  std::vector<std::vector<TokenId>> prompts;
  for (int n : {5, 23, 40, 17}) prompts.push_back(random_tokens(rng, n));
  Engine engine(cpu_backend(64), nullptr, config(/*prefix_caching=*/false));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest r = testing::request("b" + std::to_string(i), prompts[i], kNewTokens);
    r.sampling.num_top_logprobs = 5;
    r.ignore_eos = true;
    auto s = engine.submit(std::move(r));
    ASSERT_TRUE(s.ok()) << s.error_message();
    streams.push_back(*s);
  }
  for (int step = 0; step < 500 && engine.has_work(); ++step) {
    engine.step();
    engine.check_invariants();
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    Generated batched;
    while (auto o = streams[i]->poll()) {
      for (const GeneratedToken& t : o->tokens) {
        batched.tokens.push_back(t.token);
        batched.logprobs.push_back(t.logprob);
        for (const TokenLogprob& top : t.top_logprobs) batched.logprobs.push_back(top.logprob);
      }
    }
    EXPECT_EQ(batched, cold_run(prompts[i])) << "request " << i;
  }
}

// Since session 22 the simulator serves it, at its kernels' measured
// efficiencies (tests/sim/deepseek_v4_cost_test.cpp), with the KV of its
// paged layout.
TEST(DeepseekV4OnEngine, SimulatorServesItAtItsKernelsCosts) {
  auto profile = sim::profile_from_hf_dir(tiny_v4_dir());
  ASSERT_TRUE(profile.ok()) << profile.error_message();
  EXPECT_TRUE(profile->deepseek_v4_kernels);
  EXPECT_GT(profile->kv_bytes_per_token, 0.0);
  const sim::HardwareSpec hardware = sim::sluice_cuda_hardware(*profile);
  EXPECT_EQ(hardware.name, sim::h200_sluice_cuda_deepseek_v4().name);
  auto backend = sim::make_sim_backend(*profile, hardware, {}, {});
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  EXPECT_GT((*backend)->info().num_kv_blocks, 0);
}

}  // namespace
}  // namespace sluice
