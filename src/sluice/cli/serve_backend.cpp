#include "sluice/cli/serve_backend.h"

#include <algorithm>
#include <climits>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/cli/cpu_ranks.h"
#include "sluice/cli/cuda_hardware.h"
#include "sluice/cli/serve_sim_backend.h"
#include "sluice/model/model_runner.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/memory_plan.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/sim_backend.h"
#include "sluice/sim/sm_partition_cost.h"
#if SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/model/cuda/deepseek_v4_device_runner.h"
#endif

namespace sluice::cli {
namespace {

constexpr std::int64_t kDefaultCpuKvCacheBytes = 1LL << 30;

// The roofline model the scheduler and the sim share: the model directory's
// shape (or a builtin profile) on H200s.
Result<std::shared_ptr<const sim::RooflineCostModel>> roofline_cost_model(const sim::ModelProfile& profile,
                                                                         const sim::HardwareSpec& hardware,
                                                                         const sim::Parallelism& parallelism) {
  SLUICE_TRY(sim::validate(parallelism, profile));
  return std::make_shared<const sim::RooflineCostModel>(profile, hardware, parallelism);
}

std::string describe(const sim::RooflineCostModel& model) {
  const sim::Parallelism& par = model.parallelism();
  if (par.num_gpus == 1) return fmt::format("roofline ({} on {}, 1 GPU)", model.profile().name, model.hardware().name);
  return fmt::format("roofline ({} on {} x {}, tensor parallel {}, expert parallel {})", model.profile().name,
                     par.num_gpus, model.hardware().name, par.tensor_parallel, par.expert_parallel);
}

Result<ServeBackend> make_cpu(const ServeBackendOptions& options) {
  ModelRunnerOptions runner{.block_size_tokens = options.block_size_tokens,
                            .kv_cache_bytes = options.kv_cache_memory_bytes.value_or(kDefaultCpuKvCacheBytes),
                            .max_model_len_tokens = options.max_model_len_tokens,
                            .show_progress = options.show_progress,
                            .enable_expert_parallel = options.enable_expert_parallel,
                            .kv_cache_dtype = options.kv_cache_dtype};
  SLUICE_TRY_ASSIGN(backend, make_tensor_parallel_model_runner(
                                 options.model_dir, cpu_ops_per_rank(options.num_threads, options.tensor_parallel_size),
                                 runner));
  return ServeBackend{.backend = std::move(backend),
                      .cost_model = nullptr,
                      .cost_model_description = "token-count fallback (CPU: no cost model)"};
}

Result<ServeBackend> make_cuda([[maybe_unused]] const ServeBackendOptions& options) {
#if SLUICE_HAVE_CUDA
  SLUICE_TRY_ASSIGN(profile, sim::profile_from_hf_dir(options.model_dir));
  SLUICE_TRY_ASSIGN(hardware, cuda_hardware(profile, options.cuda.device_index));
  SLUICE_TRY_ASSIGN(cost_model, roofline_cost_model(profile, hardware, sim::Parallelism{}));
  spdlog::info("cuda: {}", describe(options.cuda));
  spdlog::info("cuda: the planner's prior: {}; weights read at {:.2f} TB/s before efficiencies, {:.0f} dense "
               "bf16 TFLOP/s", hardware.name, hardware.hbm_bytes_per_s / 1e12, hardware.peak_bf16_flops_per_s / 1e12);
  // cuDNN's prefill plans for every step this server can run, built before it
  // serves where asked (cuda_options.h): prefill rows up to
  // --max-num-batched-tokens, keys up to --max-model-len, up to 8 prompts a
  // step (more are rare; their plans are built in the background). MLA's
  // prefill cannot decline a step whose plan is not built (cudnn_sdpa.h's
  // run_packed), so an MLA server always builds its plans, at the warm-up
  // chunk (S34-4: built in line while serving, 33 steps of the V3 burst).
  CudaOptions cuda = options.cuda;
  if (cuda.cudnn_plans_before_serving || profile.deepseek_v3_kernels)
    cuda.cudnn_serving_bounds = {.num_q_heads = profile.num_attention_heads,
                                 .max_step_rows = options.max_num_batched_tokens,
                                 .max_keys = options.max_model_len_tokens,
                                 .max_sequences = std::min(8, options.max_num_seqs)};
  SLUICE_TRY_ASSIGN(ops, make_cuda_ops(cuda));
  register_cuda_deepseek_v4_runner();  // deepseek_v4 models run model/cuda/deepseek_v4_forward.h
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
    return Error{"--device cuda: cannot read the device's memory size"};
  // vLLM's meaning: the share of the whole device this instance may use.
  // Weights (and whatever else is resident) are measured after the upload;
  // activations are not resident yet, so their planned size is reserved here.
  const sim::MemoryPlan plan =
      sim::plan_memory(profile, hardware, sim::Parallelism{},
                       {.gpu_memory_utilization = options.gpu_memory_utilization,
                        .max_num_seqs = options.max_num_seqs,
                        .max_num_batched_tokens = options.max_num_batched_tokens,
                        .block_size_tokens = options.block_size_tokens,
                        .max_model_len_tokens = options.max_model_len_tokens});
  const auto total = static_cast<std::int64_t>(total_bytes);
  const auto activation_reserve_bytes = static_cast<std::int64_t>(plan.activation_bytes);
  const auto budget_bytes =
      static_cast<std::int64_t>(options.gpu_memory_utilization * static_cast<double>(total)) - activation_reserve_bytes;
  spdlog::info("cuda: {:.2f} GiB device memory, {:.2f} GiB free; budget {:.2f} x total - {:.2f} GiB activation "
               "reserve = {:.2f} GiB for weights and KV",
               total / 1073741824.0, free_bytes / 1073741824.0, options.gpu_memory_utilization,
               activation_reserve_bytes / 1073741824.0, budget_bytes / 1073741824.0);
  ModelRunnerOptions runner{.block_size_tokens = options.block_size_tokens,
                            .max_model_len_tokens = options.max_model_len_tokens,
                            .show_progress = options.show_progress,
                            .device_memory_budget_bytes = budget_bytes,
                            .device_memory_total_bytes = total,
                            .kv_cache_dtype = options.kv_cache_dtype};
  SLUICE_TRY_ASSIGN(backend, make_model_runner(options.model_dir, std::move(ops), runner));
  std::string description = describe(*cost_model);
  return ServeBackend{.backend = std::move(backend),
                      .cost_model = std::move(cost_model),
                      .cost_model_description = std::move(description)};
#else
  return Error{"--device cuda: this build has no CUDA backend (configure with -DSLUICE_CUDA=ON)"};
#endif
}

Result<ServeBackend> make_sim(const ServeBackendOptions& options, const Tokenizer& tokenizer,
                              const std::vector<TokenId>& eos_token_ids) {
  sim::ModelProfile profile;
  if (options.sim_profile.empty()) {
    SLUICE_TRY_ASSIGN(from_dir, sim::profile_from_hf_dir(options.model_dir));
    profile = std::move(from_dir);
  } else {
    const auto builtin = sim::find_profile(options.sim_profile);
    if (!builtin) {
      std::string names;
      for (const std::string& name : sim::list_profiles()) names += (names.empty() ? "" : ", ") + name;
      return Error{fmt::format("--sim-profile {}: unknown (builtin: {})", options.sim_profile, names)};
    }
    profile = *builtin;
  }
  // --kv-cache-dtype fp8: the profile's FP8 layout in memory and in the attention's reads (refused without one),
  // once here for the cost model, the memory plan and the sim alike (their own dtype stays auto).
  if (options.kv_cache_dtype == KvCacheDtype::kFp8) {
    SLUICE_TRY_ASSIGN(fp8, sim::with_fp8_kv_cache(profile));
    profile = std::move(fp8);
  }
  const sim::Parallelism parallelism{.num_gpus = options.tensor_parallel_size,
                                     .tensor_parallel = options.tensor_parallel_size,
                                     .expert_parallel = options.enable_expert_parallel ? options.tensor_parallel_size : 1};
  const sim::HardwareSpec hardware = sim::sluice_cuda_hardware(profile);
  SLUICE_TRY_ASSIGN(cost_model, roofline_cost_model(profile, hardware, parallelism));
  // The same question `sluice plan` answers: a launch whose weights and
  // activations leave no room for KV is refused, whatever --kv-cache-memory says.
  const sim::MemoryOptions memory{.gpu_memory_utilization = options.gpu_memory_utilization,
                                  .max_num_seqs = options.max_num_seqs,
                                  .max_num_batched_tokens = options.max_num_batched_tokens,
                                  .block_size_tokens = options.block_size_tokens,
                                  .max_model_len_tokens = options.max_model_len_tokens};
  const sim::MemoryPlan plan = sim::plan_memory(profile, hardware, parallelism, memory);
  if (!plan.fits())
    return Error{fmt::format("{} does not fit on {} x {} (--tensor-parallel-size {}{}): {}", profile.name,
                             parallelism.num_gpus, hardware.name, parallelism.tensor_parallel,
                             options.enable_expert_parallel ? ", --enable-expert-parallel" : "",
                             sim::describe_shortfall(plan))};
  // The plan's blocks unless --kv-cache-memory sets them: make_sim_backend
  // need not plan the same memory again.
  std::int32_t num_kv_blocks = plan.num_kv_blocks;
  if (options.kv_cache_memory_bytes) {
    const double bytes_per_block = profile.kv_bytes_per_token * options.block_size_tokens;
    if (bytes_per_block <= 0) return Error{fmt::format("sim profile {} has no KV bytes per token", profile.name)};
    const double num_blocks = static_cast<double>(*options.kv_cache_memory_bytes) / bytes_per_block;
    if (num_blocks < 1 || num_blocks > INT32_MAX)
      return Error{fmt::format("--kv-cache-memory {} holds {:.0f} blocks of {} ({:.0f} bytes each); need 1 to {}",
                               *options.kv_cache_memory_bytes, num_blocks, profile.name, bytes_per_block, INT32_MAX)};
    num_kv_blocks = static_cast<std::int32_t>(num_blocks);
  }
  SLUICE_TRY_ASSIGN(simulated, sim::make_sim_backend(profile, hardware, parallelism,
                                                     {.memory = memory,
                                                      .max_model_len_tokens = options.max_model_len_tokens,
                                                      .num_kv_blocks_override = num_kv_blocks}));
  spdlog::info("sim: {} KV blocks of {} tokens ({})", simulated->info().num_kv_blocks, options.block_size_tokens,
               options.kv_cache_memory_bytes ? "--kv-cache-memory" : "the memory plan, as sluice plan computes it");
  SLUICE_TRY_ASSIGN(paced, PacedSimBackend::make(std::move(simulated), tokenizer, eos_token_ids,
                                                 {.speed = options.sim_speed, .eos_every = options.sim_eos_every}));
  std::string description = describe(*cost_model) +
                            (options.sim_speed > 0 ? fmt::format(", steps paced at {}x predicted time", options.sim_speed)
                                                   : std::string(", steps not paced (--sim-speed 0)"));
  return ServeBackend{.backend = std::move(paced),
                      .cost_model = std::move(cost_model),
                      .cost_model_description = std::move(description)};
}

}  // namespace

Result<AutoDecodeLane> auto_decode_lane([[maybe_unused]] const std::string& model_dir,
                                       [[maybe_unused]] double pace_ms, [[maybe_unused]] std::int32_t max_context) {
#if SLUICE_HAVE_CUDA
  SLUICE_TRY_ASSIGN(profile, sim::profile_from_hf_dir(model_dir));
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return Error{"--decode-lane auto: no CUDA device"};
  SLUICE_TRY_ASSIGN(hardware, cuda_hardware(profile, device));
  SLUICE_TRY_ASSIGN(cost_model, roofline_cost_model(profile, hardware, sim::Parallelism{}));
  // A step may fill 0.9 of the pace: the pace is itself 0.8 of the 50 ms that
  // 20 tok/s allows, and S17-lead-1's 8-SM lane (30.3 ms steps at 40 ms) kept
  // every chat at 24.6 tok/s or more.
  AutoDecodeLane lane{.num_sms = sim::fewest_decode_lane_sms(*cost_model, hardware, pace_ms, 0.9)};
  constexpr double kPromisedTokenIntervalMs = 1000.0 / 20;
  if (lane.num_sms > 0)
    lane.chats_context_at_20_tok_s =
        sim::decode_lane_chat_context(*cost_model, hardware, lane.num_sms, kPromisedTokenIntervalMs, max_context);
  return lane;
#else
  return AutoDecodeLane{};
#endif
}

Result<ServeBackend> make_serve_backend(const ServeBackendOptions& options, const Tokenizer& tokenizer,
                                        const std::vector<TokenId>& eos_token_ids) {
  if (options.device == "cpu") return make_cpu(options);
  if (options.device == "cuda") return make_cuda(options);
  if (options.device == "sim") return make_sim(options, tokenizer, eos_token_ids);
  return Error{fmt::format("--device {}: expected cpu, cuda or sim", options.device)};
}

}  // namespace sluice::cli
