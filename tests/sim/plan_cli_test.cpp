// `sluice plan` end to end: the numbers it prints are the memory plan's and
// the engine's, a model that does not fit exits 2 with the numbers, bad flags
// exit non-zero with a message naming the flag.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/deepseek_v4_flash_config.h"
#include "../support/run_command.h"

#include "sluice/engine/engine.h"
#include "sluice/sim/engine_replay.h"
#include "sluice/sim/memory_plan.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/sim_backend.h"
#include "sluice/sim/workload.h"

namespace sluice::sim {
namespace {

using sluice::testing::RunResult;

RunResult run(const std::string& args) { return sluice::testing::run_sluice("plan " + args); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(PlanCli, ListsProfiles) {
  const RunResult r = run("--list-profiles");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const auto& name : list_profiles()) EXPECT_TRUE(contains(r.output, name)) << r.output;
}

TEST(PlanCli, DeepSeekOnEightH200) {
  const RunResult r = run("--profile deepseek-v4.1-flash --gpus 8 --tensor-parallel-size 8 --expert-parallel "
                          "--max-model-len 1048576 --max-num-seqs 64");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const ModelProfile ds = *find_profile("deepseek-v4.1-flash");
  const MemoryPlan plan = plan_memory(ds, h200(), {.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8},
                                      {.max_num_seqs = 64, .max_model_len_tokens = 1048576});
  EXPECT_TRUE(contains(r.output, "KV capacity         " + std::to_string(plan.kv_capacity_tokens) + " tokens"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "host tables")) << r.output;  // Engram in host RAM
  EXPECT_TRUE(contains(r.output, "16 requests served, 0 rejected")) << r.output;
  // Concurrency at 1M: capacity / 1M sequences, capped at 64.
  EXPECT_TRUE(contains(r.output, std::to_string(plan.kv_capacity_tokens / 1048576) + "  -> 64  (max-model-len)"))
      << r.output;
}

// The same question on H100s: 80 GB a card, so less KV beside the same
// weights, and decode priced at its 3.35 TB/s.
TEST(PlanCli, AnH100HoldsLessAndDecodesSlower) {
  std::array<RunResult, 2> runs;  // H200, H100
  for (const std::size_t i : {0u, 1u}) {
    runs[i] = run(i == 0 ? "--profile llama-3-8b" : "--profile llama-3-8b --gpu h100");
    ASSERT_EQ(runs[i].exit_code, 0) << runs[i].output;
  }
  const RunResult& h200_run = runs[0];
  const RunResult& h100_run = runs[1];
  EXPECT_TRUE(contains(h100_run.output, "on 1 x H100 SXM, as H200 scaled to it")) << h100_run.output;
  const HardwareSpec h100 = on_device(h200(), h100_sxm_facts());
  const MemoryPlan on_h100 = plan_memory(*find_profile("llama-3-8b"), h100, {}, {});
  const MemoryPlan on_h200 = plan_memory(*find_profile("llama-3-8b"), h200(), {}, {});
  EXPECT_LT(on_h100.kv_capacity_tokens, on_h200.kv_capacity_tokens / 2);
  EXPECT_TRUE(contains(h100_run.output, "KV capacity         " + std::to_string(on_h100.kv_capacity_tokens) + " tokens"))
      << h100_run.output;
  // Batch-1 decode: weight reads at 3.0 against 4.3 TB/s.
  auto batch1_ms = [](const std::string& out) {
    const std::string line = "decode, 1 sequence at position 0";
    const std::size_t at = out.find(line);
    return at == std::string::npos ? 0.0 : std::stod(out.substr(at + line.size()));
  };
  EXPECT_NEAR(batch1_ms(h100_run.output) / batch1_ms(h200_run.output), 4.8 / 3.35, 0.05) << h100_run.output;
  EXPECT_NE(run("--profile llama-3-8b --gpu a100").exit_code, 0);
}

// A DeepSeek-V4 config: plan prints the KV layout's bytes (3850 B per token,
// 3.7 MB of window rings and compressor state per sequence; hf_profile_test
// derives them), sizes blocks by its compression windows, and refuses a block
// size that splits one.
TEST(PlanCli, DeepSeekV4FlashReportsItsKvLayout) {
  const std::string dir = std::string(SLUICE_BINARY_DIR) + "/test-scratch/plan-deepseek-v4-flash";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << sluice::testing::deepseek_v4_flash_config_json().dump();
  const RunResult r = run("--model " + dir + " --gpus 8 --expert-parallel --max-model-len 131072");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "KV cache          3850 B per token (auto), whole model; plus 128-token window "
                                 "rings and compressor state, 3.7 MB per sequence"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "blocks of 1024)")) << r.output;  // serve's default for V4
  // The CUDA server's blocks of 1024 today: per layer the block's last window
  // (128 latents of 512, bf16), CSA's entries (256 of 512, bf16) and index
  // keys (256 of 128 e4m3 codes and an f32 scale each) and its two open
  // entries' pool states (2 x 3 x 512, and x 128, f32), HCA's 8 entries (bf16)
  // and its one state (3 x 512).
  const double block_bytes = 2.0 * 43 * 128 * 512 + 2.0 * 21 * 256 * 512 + 21.0 * 256 * (128 + 4) +
                             4.0 * 21 * (2 * 3 * 512 + 2 * 3 * 128) + 2.0 * 20 * 8 * 512 + 4.0 * 20 * 3 * 512;
  const std::string served_at = "holds this cache in blocks of 1024 today (bf16 latents, e4m3 index keys): ";
  const std::size_t at = r.output.find(served_at);
  ASSERT_NE(at, std::string::npos) << r.output;
  const double served = std::stod(r.output.substr(at + served_at.size()));
  EXPECT_NEAR(served, block_bytes / 1024, 0.5) << r.output;
  EXPECT_TRUE(contains(r.output, "x the layout above, which the capacity below assumes)")) << r.output;
  EXPECT_FALSE(contains(r.output, "as served today")) << r.output;  // 8 GPUs: the CUDA server runs V4 on one

  // Four layers on one GPU: the capacity as served, in the same KV bytes, is
  // the design's in the ratio of their bytes a token (3.6x for these layers).
  nlohmann::json small = sluice::testing::deepseek_v4_flash_config_json();
  small["num_hidden_layers"] = 4;
  small["compress_ratios"] = {0, 4, 128, 4, 0};
  small["num_hash_layers"] = 1;
  const std::string small_dir = std::string(SLUICE_BINARY_DIR) + "/test-scratch/plan-deepseek-v4-flash-4-layers";
  std::filesystem::create_directories(small_dir);
  std::ofstream(small_dir + "/config.json") << small.dump();
  const RunResult one = run("--model " + small_dir + " --gpus 1 --max-model-len 65536");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto number_after = [&](const std::string& text) {
    const std::size_t p = one.output.find(text);
    EXPECT_NE(p, std::string::npos) << one.output;
    return p == std::string::npos ? 0.0 : std::stod(one.output.substr(p + text.size()));
  };
  const double design_tokens = number_after("KV capacity         ");
  const double served_tokens = number_after("as served today  ");
  const double design_bytes = number_after("KV cache          ");  // a token, the model line
  const double served_bytes = number_after("blocks of 1024 today (bf16 latents, e4m3 index keys): ");
  EXPECT_GT(served_tokens, 0.0) << one.output;
  EXPECT_GT(served_bytes, 2 * design_bytes) << one.output;
  EXPECT_NEAR(served_tokens * served_bytes / (design_tokens * design_bytes), 1.0, 0.01) << one.output;
  // --kv-cache-dtype fp8 (or fp8_ds_mla, vLLM's name): the same design (its
  // records are FP8), the served blocks' latents and entries as fp8_ds_mla
  // records of 584 B: 7,424 B a token at 1024.
  for (const char* fp8_name : {"fp8", "fp8_ds_mla"}) {
    const RunResult fp8 = run("--model " + dir + " --gpus 8 --expert-parallel --max-model-len 131072 --kv-cache-dtype " +
                              fp8_name);
    ASSERT_EQ(fp8.exit_code, 0) << fp8.output;
    EXPECT_TRUE(contains(fp8.output, "KV cache          3850 B per token (" + std::string(fp8_name) + ")"))
        << fp8.output;
    EXPECT_TRUE(contains(fp8.output, "blocks of 1024 today (fp8_ds_mla latents, e4m3 index keys): 7424 B per token"))
        << fp8.output;
  }
  // Blocks of 128 keep every position's window latent: 6.9 MB a block, 53,741 B a token.
  const RunResult fine = run("--model " + dir + " --gpus 8 --expert-parallel --max-model-len 131072 --block-size 128");
  ASSERT_EQ(fine.exit_code, 0) << fine.output;
  EXPECT_TRUE(contains(fine.output, "blocks of 128 today (bf16 latents, e4m3 index keys): 53741 B per token"))
      << fine.output;
  const RunResult split = run("--model " + dir + " --gpus 8 --block-size 64");
  EXPECT_EQ(split.exit_code, 1) << split.output;
  EXPECT_TRUE(contains(split.output, "--block-size 64")) << split.output;
  EXPECT_TRUE(contains(split.output, "multiple of 128")) << split.output;
}

// vLLM's spelling of the flag plans the same launch.
TEST(PlanCli, EnableExpertParallelIsExpertParallel) {
  const std::string launch = "--profile deepseek-v4.1-flash --gpus 8 --tensor-parallel-size 8 --max-model-len 65536 ";
  const RunResult ours = run(launch + "--expert-parallel");
  const RunResult vllm = run(launch + "--enable-expert-parallel");
  ASSERT_EQ(ours.exit_code, 0) << ours.output;
  EXPECT_EQ(vllm.exit_code, 0) << vllm.output;
  EXPECT_TRUE(contains(vllm.output, "expert parallel 8")) << vllm.output;
  EXPECT_EQ(vllm.output, ours.output);
}

// The latency numbers are the engine's: the report workload replayed here
// through an Engine built from the same flags takes as many steps and as long
// as plan prints. A small KV cache (20% of the GPU) makes admission matter,
// where a scheduler of plan's own would drift from the engine's.
TEST(PlanCli, TheWorkloadRunIsTheEngines) {
  constexpr std::int32_t kMaxModelLen = 32768;
  const RunResult r = run("--profile llama-3-8b --gpu-memory-utilization 0.2 --max-model-len 32768");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const ModelProfile profile = *find_profile("llama-3-8b");
  const Parallelism one_gpu{};
  auto backend = make_sim_backend(profile, h200(), one_gpu,
                                  {.memory = {.gpu_memory_utilization = 0.2, .max_model_len_tokens = kMaxModelLen},
                                   .max_model_len_tokens = kMaxModelLen});
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  EngineConfig config;
  config.max_model_len_tokens = kMaxModelLen;
  config.clock = ClockMode::kVirtual;
  Engine engine(std::move(backend).value(), std::make_shared<const RooflineCostModel>(profile, h200(), one_gpu),
                config);
  std::vector<TimedRequest> workload;
  const std::vector<WorkloadRequest> report = report_workload(kMaxModelLen);
  for (std::size_t i = 0; i < report.size(); ++i) {
    TimedRequest t{.arrival_ms = report[i].arrival_ms};
    t.request.request_id = std::to_string(i);
    t.request.prompt_token_ids = synthetic_tokens(i, report[i].num_prompt_tokens, profile.vocab_size);
    t.request.max_tokens = report[i].num_output_tokens;
    t.request.ignore_eos = true;
    workload.push_back(std::move(t));
  }
  const ReplayOutcome expected = replay(engine, std::move(workload), /*max_steps=*/1'000'000);
  ASSERT_TRUE(expected.drained);
  char line[160];
  std::snprintf(line, sizeof(line), "16 requests served, 0 rejected, %lld steps, longest step %.1f ms, makespan %.1f s",
                static_cast<long long>(expected.stats.num_steps), expected.max_step_ms, expected.stats.now_ms / 1e3);
  EXPECT_TRUE(contains(r.output, line)) << line << "\n" << r.output;
}

TEST(PlanCli, ModelsThatDoNotFitExitTwoWithTheNumbers) {
  const RunResult weights = run("--profile llama-3-70b");
  EXPECT_EQ(weights.exit_code, 2) << weights.output;
  EXPECT_TRUE(contains(weights.output, "DOES NOT FIT: weights 141.1 GB")) << weights.output;
  const RunResult context = run("--profile llama-3-8b --gpu-memory-utilization 0.2");
  EXPECT_EQ(context.exit_code, 2) << context.output;
  EXPECT_TRUE(contains(context.output, "--max-model-len 131072")) << context.output;
  EXPECT_EQ(run("--profile llama-3-8b --gpu-memory-utilization 0.2 --max-model-len 32768").exit_code, 0);
  EXPECT_EQ(run("--profile deepseek-v4.1-flash --gpus 2 --expert-parallel").exit_code, 2);  // 156 GB of weights per GPU
  EXPECT_EQ(run("--profile deepseek-v4.1-flash --gpus 4 --expert-parallel").exit_code, 0);  // 80 GB: fits
}

TEST(PlanCli, FlagsTakeEffect) {
  const RunResult auto_kv = run("--profile llama-3-8b --max-model-len 32768");
  const RunResult fp8_kv = run("--profile llama-3-8b --max-model-len 32768 --kv-cache-dtype fp8");
  ASSERT_EQ(auto_kv.exit_code, 0) << auto_kv.output;
  ASSERT_EQ(fp8_kv.exit_code, 0) << fp8_kv.output;
  EXPECT_TRUE(contains(auto_kv.output, "131072 B per token")) << auto_kv.output;
  EXPECT_TRUE(contains(fp8_kv.output, "65536 B per token")) << fp8_kv.output;
  const RunResult tp2 = run("--profile llama-3-70b --gpus 4 --tensor-parallel-size 2 --max-model-len 8192");
  ASSERT_EQ(tp2.exit_code, 0) << tp2.output;
  EXPECT_TRUE(contains(tp2.output, "tensor parallel 2, expert parallel 1, 2 attention replicas")) << tp2.output;
  const RunResult step = run("--profile llama-3-8b --max-model-len 32768 --max-step-ms 20");
  EXPECT_TRUE(contains(step.output, "step target 20 ms")) << step.output;
  // Two step loops: the same workload, the decodes on 16 SMs, another run.
  const RunResult lanes = run("--profile llama-3-8b --max-model-len 32768 --decode-lane sms:16");
  ASSERT_EQ(lanes.exit_code, 0) << lanes.output;
  EXPECT_TRUE(contains(lanes.output, "two step loops, decodes on --decode-lane sms:16, a step at most every 40 ms"))
      << lanes.output;
  EXPECT_TRUE(contains(lanes.output, "16 requests served")) << lanes.output;
  const auto makespan = [](const std::string& out) { return out.substr(out.find("requests served")); };
  EXPECT_NE(makespan(lanes.output), makespan(auto_kv.output));
}

TEST(PlanCli, BadFlagsAreRejected) {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"--profile llama-3-8b --expert-parallel", "dense model"},
      {"--profile deepseek-v4.1-flash --expert-parallel", "--gpus > 1"},
      {"--profile llama-3-8b --gpus 8 --tensor-parallel-size 3", "must divide --gpus"},
      {"--profile deepseek-v4.1-flash --gpus 16", "exceeds 8"},
      {"--profile nope", "unknown"},
      {"--profile llama-3-8b --kv-cache-dtype fp9", "fp9"},
      {"", "exactly one of --model DIR or --profile NAME"},
      {"--profile llama-3-8b --model /tmp", "excludes"},
      {"--profile llama-3-8b --num-requests 5", "needs --workload"},
      {"--profile llama-3-8b --max-model-len 200000", "exceeds"},
      {"--profile llama-3-8b --workload /nonexistent/trace.jsonl", "nonexistent"},
      {"--profile llama-3-8b --gpu-memory-utilization 1.5", "gpu-memory-utilization"},
      {"--profile llama-3-8b --max-model-len 32768 --max-num-seqs 64 --max-num-batched-tokens 32",
       "--max-num-batched-tokens (32) must be >= --max-num-seqs (64)"},
      {"--model /nonexistent-model-dir", "nonexistent-model-dir"},
      {"--profile llama-3-8b --max-model-len 32768 --decode-lane high-priority", "sms:N"},
      {"--profile llama-3-8b --max-model-len 32768 --decode-lane sms:x", "--decode-lane"},
      {"--profile llama-3-8b --max-model-len 8192 --gpus 2 --decode-lane sms:16", "SM count"},
  };
  for (const auto& c : cases) {
    const RunResult r = run(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args << "\n" << r.output;
    EXPECT_NE(r.exit_code, 2) << c.args << "\n" << r.output;  // 2 means "does not fit"
    EXPECT_TRUE(contains(r.output, c.message)) << c.args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace sluice::sim
