// `sluice plan`: memory per GPU, KV capacity, concurrency and predicted
// latency for a model on a machine, before anyone buys it. The latency comes
// from the real engine (the scheduler `sluice serve` runs, with the same
// flags) replaying a workload on the sim backend's virtual clock. Exit codes:
// 0 the plan fits, 1 bad input, 2 the model does not fit.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sluice/cli/commands.h"
#include "sluice/common/check.h"
#include "sluice/engine/engine.h"
#include "sluice/sim/engine_replay.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/memory_plan.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/parallelism.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/sim_backend.h"
#include "sluice/sim/workload.h"

namespace sluice::cli {
namespace {

constexpr int kExitBadInput = 1;
constexpr int kExitDoesNotFit = 2;

struct PlanOptions {
  std::string model_dir;
  std::string profile_name;
  bool list_profiles = false;
  std::int32_t num_gpus = 1;
  std::optional<std::int32_t> tensor_parallel;  // default: all GPUs
  bool expert_parallel = false;
  std::optional<std::int32_t> max_model_len;    // default: the model's
  std::int32_t max_num_seqs = 64;
  std::int32_t max_num_batched_tokens = 8192;
  double gpu_memory_utilization = 0.9;
  std::string kv_cache_dtype = "auto";
  std::optional<std::int32_t> block_size;  // default: 16, aligned to the model's (block_size_for)
  std::string workload_path;
  std::int64_t num_requests = 0;
  double max_step_ms = 50;
  std::string gpu = "h200";  // h200 | h100
  std::string decode_lane = "off";  // off | sms:N (serve's --decode-lane on the simulated device)
  std::int32_t decode_lane_max_context = 0;  // serve's --decode-lane-max-context
  std::optional<double> decode_lane_interval_ms;  // serve's --decode-lane-interval-ms
};

[[noreturn]] void fail(int code, const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  throw CLI::RuntimeError(code);
}

double gb(double bytes) { return bytes / 1e9; }

void print_profiles() {
  std::printf("built-in profiles (--profile NAME):\n");
  for (const auto& name : sim::list_profiles()) {
    const auto p = *sim::find_profile(name);
    std::printf("  %-22s %6.1fB params, %5.1fB active per output token, %2d layers, KV %.0f B/token, max %d positions\n",
                name.c_str(), p.total_params() / 1e9, p.active_params_per_output_token() / 1e9, p.num_layers,
                p.kv_bytes_per_token, p.max_position_embeddings);
  }
}

sim::ModelProfile resolve_profile(const PlanOptions& o) {
  if (!o.model_dir.empty()) {
    auto profile = sim::profile_from_hf_dir(o.model_dir);
    if (!profile) fail(kExitBadInput, profile.error_message());
    return std::move(profile).value();
  }
  auto profile = sim::find_profile(o.profile_name);
  if (!profile) fail(kExitBadInput, "--profile " + o.profile_name + ": unknown (see --list-profiles)");
  return *profile;
}

// --block-size, or serve's default (DeepSeek-V4's), or 16 made a multiple of
// the model's alignment; a size that splits a compression window is refused.
std::int32_t block_size_for(const PlanOptions& o, const sim::ModelProfile& profile) {
  const std::int32_t alignment = profile.kv_block_alignment_tokens;
  const std::int32_t block_size = o.block_size.value_or(
      profile.kv_default_block_tokens > 0 ? profile.kv_default_block_tokens : std::lcm(16, alignment));
  if (block_size % alignment != 0)
    fail(kExitBadInput, "--block-size " + std::to_string(block_size) + ": " + profile.name + " needs a multiple of " +
                            std::to_string(alignment) + " (its compression windows)");
  return block_size;
}

void print_step_times(const sim::RooflineCostModel& model, std::int32_t max_model_len, std::int32_t max_num_seqs) {
  const auto decode = [&](std::int32_t batch, std::int32_t position) {
    StepShape shape;
    shape.sequences.assign(static_cast<std::size_t>(batch), {.num_new_tokens = 1, .num_computed_tokens = position});
    return model.predict_step_ms(shape);
  };
  const auto prefill = [&](std::int32_t tokens, std::int32_t position) {
    return model.predict_step_ms({.sequences = {{.num_new_tokens = tokens, .num_computed_tokens = position}}});
  };
  const std::int32_t mid = std::min(max_model_len / 2, 131072);
  std::printf("step times (predicted, one step)\n");
  std::printf("  decode, 1 sequence at position 0           %8.2f ms  (%.0f tok/s)\n", decode(1, 0), 1e3 / decode(1, 0));
  std::printf("  decode, 1 sequence at position %-8d    %8.2f ms\n", mid, decode(1, mid));
  std::printf("  decode, %3d sequences at position %-8d %8.2f ms  (%.0f tok/s total)\n", max_num_seqs, mid,
              decode(max_num_seqs, mid), max_num_seqs * 1e3 / decode(max_num_seqs, mid));
  const std::int32_t chunk = std::min(4096, max_model_len);
  std::printf("  prefill %d tokens at position 0           %8.2f ms  (%.0f tok/s)\n", chunk, prefill(chunk, 0),
              chunk * 1e3 / prefill(chunk, 0));
  const std::int32_t late = std::max(0, std::min(250000, max_model_len - chunk));
  if (late > 0) std::printf("  prefill %d tokens at position %-8d    %8.2f ms\n", chunk, late, prefill(chunk, late));
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(i, values.size() - 1)];
}

struct Workload {
  std::string title;
  std::vector<sim::WorkloadRequest> requests;  // in arrival order
};

Workload load_workload(const PlanOptions& o, std::int32_t max_model_len) {
  Workload w;
  if (o.workload_path.empty()) {
    w.requests = sim::report_workload(max_model_len);
    const auto& chat = w.requests.front();
    const auto& shortest = w.requests[8];  // after the 8 chats
    const auto& longest = w.requests.back();
    w.title = "built-in report: 8 chats (" + std::to_string(chat.num_prompt_tokens) + " in, " +
              std::to_string(chat.num_output_tokens) + " out) at 0 s; 8 prompts of " +
              std::to_string(shortest.num_prompt_tokens) + "-" + std::to_string(longest.num_prompt_tokens) +
              " tokens (" + std::to_string(shortest.num_output_tokens) + "-" +
              std::to_string(longest.num_output_tokens) + " out) over 1-10 s";
  } else {
    auto loaded = sim::load_workload_jsonl(o.workload_path, o.num_requests);
    if (!loaded) fail(kExitBadInput, loaded.error_message());
    w.requests = std::move(loaded).value();
    w.title = o.workload_path + " (" + std::to_string(w.requests.size()) + " requests)";
  }
  w.title += "; the engine's sluice policy, step target " + std::to_string(static_cast<int>(o.max_step_ms)) + " ms";
  if (o.decode_lane != "off")
    w.title += fmt::format("; two step loops, decodes on --decode-lane {}, a step at most every {:g} ms", o.decode_lane,
                           o.decode_lane_interval_ms.value_or(kDefaultDecodeLaneIntervalMs));
  return w;
}

// What `sluice serve` would run with the same flags, on the virtual clock.
EngineConfig engine_config(const PlanOptions& o, std::int32_t max_model_len) {
  EngineConfig c;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_step_ms = o.max_step_ms;
  c.max_model_len_tokens = max_model_len;
  c.clock = ClockMode::kVirtual;
  auto lane = parse_decode_lane(o.decode_lane);
  if (!lane) fail(kExitBadInput, lane.error_message());
  c.decode_lane = lane->lane;
  c.decode_lane_sms = lane->num_sms;
  c.decode_lane_max_context = o.decode_lane_max_context;
  c.decode_lane_interval_ms = decode_lane_interval_or_default(o.decode_lane_interval_ms, c.decode_lane);
  return c;
}

// The workload through the engine on its virtual clock. Request i is id "i",
// distinct synthetic prompt tokens (no prefix is shared) and exactly its
// output length.
sim::ReplayOutcome replay_workload(Engine& engine, const std::vector<sim::WorkloadRequest>& workload) {
  std::vector<double> arrival_ms;
  std::int64_t num_tokens = 0;
  for (const sim::WorkloadRequest& w : workload) {
    arrival_ms.push_back(w.arrival_ms);
    num_tokens += std::int64_t{w.num_prompt_tokens} + w.num_output_tokens;
  }
  const std::int32_t vocab_size = engine.backend_info().vocab_size;
  const auto make_request = [&](std::size_t i) {
    EngineRequest r;
    r.request_id = std::to_string(i);
    r.prompt_token_ids = sim::synthetic_tokens(i, workload[i].num_prompt_tokens, vocab_size);
    r.max_tokens = workload[i].num_output_tokens;
    r.ignore_eos = true;
    return r;
  };
  // Every step advances some request by a token at least; the factor leaves
  // room for recomputing preempted requests. Reaching it means an engine bug.
  const std::int64_t max_steps = 4 * num_tokens + 1000;
  return sim::replay(engine, arrival_ms, make_request, max_steps);
}

void print_workload(const Workload& workload, const sim::ReplayOutcome& outcome, bool per_request) {
  std::printf("workload: %s\n", workload.title.c_str());
  std::vector<std::string> rejections(workload.requests.size());
  for (const sim::ReplayRejection& r : outcome.rejections) rejections[r.index] = r.message;
  std::vector<double> ttft_s, itl_ms, gap_ms;
  std::int64_t num_unfinished = 0;
  if (per_request) {
    std::printf("  %4s %9s %8s %7s %9s %12s %11s %9s\n", "req", "arrive_s", "prompt", "output", "ttft_s",
                "mean_itl_ms", "max_gap_ms", "finish_s");
  }
  for (std::size_t i = 0; i < workload.requests.size(); ++i) {
    const sim::WorkloadRequest& w = workload.requests[i];
    const auto it = outcome.timelines.find(std::to_string(i));
    const bool served = it != outcome.timelines.end() && it->second.finish_reason == FinishReason::kLength;
    if (!served) {
      std::string why = "rejected: " + rejections[i];
      if (rejections[i].empty()) {
        ++num_unfinished;
        why = it == outcome.timelines.end() ? std::string("not finished")
                                            : "ended: " + std::string(to_string(*it->second.finish_reason));
      }
      if (per_request) {
        std::printf("  %4zu %9.1f %8d %7d  %s\n", i, w.arrival_ms / 1e3, w.num_prompt_tokens, w.num_output_tokens,
                    why.c_str());
      }
      continue;
    }
    const RequestTimeline& t = it->second;
    const double ttft_ms = *t.first_token_ms - t.arrival_ms;
    const auto num_tokens = static_cast<std::int64_t>(t.token_ms.size());
    const double mean_itl_ms = num_tokens > 1 ? (t.token_ms.back() - t.token_ms.front()) / (num_tokens - 1) : 0.0;
    const double max_gap_ms = sim::max_token_gap_ms(t);
    ttft_s.push_back(ttft_ms / 1e3);
    itl_ms.push_back(mean_itl_ms);
    gap_ms.push_back(max_gap_ms);
    if (per_request) {
      std::printf("  %4zu %9.1f %8d %7lld %9.2f %12.1f %11.1f %9.1f\n", i, t.arrival_ms / 1e3, t.num_prompt_tokens,
                  static_cast<long long>(num_tokens), ttft_ms / 1e3, mean_itl_ms, max_gap_ms, *t.finish_ms / 1e3);
    }
  }
  double mean_ttft = 0, mean_itl = 0;
  for (double v : ttft_s) mean_ttft += v / static_cast<double>(ttft_s.size());
  for (double v : itl_ms) mean_itl += v / static_cast<double>(itl_ms.size());
  const EngineStats& stats = outcome.stats;
  std::printf("  %zu requests served, %lld rejected, %lld steps, longest step %.1f ms, makespan %.1f s, "
              "%lld preemptions\n",
              ttft_s.size(), static_cast<long long>(outcome.num_rejected()), static_cast<long long>(stats.num_steps),
              outcome.max_step_ms, stats.now_ms / 1e3, static_cast<long long>(stats.num_preemptions));
  if (num_unfinished > 0) {
    std::printf("  NOT FINISHED: %lld requests did not end by length%s\n", static_cast<long long>(num_unfinished),
                outcome.drained ? "" : " (the step bound ran out)");
  }
  std::printf("  TTFT        mean %.2f s, p50 %.2f s, p90 %.2f s, max %.2f s\n", mean_ttft,
              percentile(ttft_s, 0.5), percentile(ttft_s, 0.9), percentile(ttft_s, 1.0));
  std::printf("  inter-token mean %.1f ms (p90 of per-request means %.1f ms); longest gap %.1f ms\n", mean_itl,
              percentile(itl_ms, 0.9), percentile(gap_ms, 1.0));
  std::printf("  output throughput %.0f tok/s over the makespan\n",
              stats.now_ms > 0 ? static_cast<double>(stats.num_generated_tokens) * 1e3 / stats.now_ms : 0.0);
}

void run_plan(const PlanOptions& o) {
  if (o.list_profiles) {
    print_profiles();
    return;
  }
  if (o.model_dir.empty() == o.profile_name.empty()) fail(kExitBadInput, "give exactly one of --model DIR or --profile NAME");
  if (o.num_requests > 0 && o.workload_path.empty()) fail(kExitBadInput, "--num-requests needs --workload");

  sim::ModelProfile profile = resolve_profile(o);
  const sim::HardwareSpec hardware = o.gpu == "h100" ? sim::on_device(sim::h200(), sim::h100_sxm_facts()) : sim::h200();
  if (o.expert_parallel && !profile.is_moe()) {
    fail(kExitBadInput, "--expert-parallel: " + profile.name + " is a dense model, it has no experts");
  }
  if (o.expert_parallel && o.num_gpus == 1) fail(kExitBadInput, "--expert-parallel needs --gpus > 1");
  sim::Parallelism par;
  par.num_gpus = o.num_gpus;
  par.tensor_parallel = o.tensor_parallel.value_or(o.num_gpus);
  par.expert_parallel = o.expert_parallel ? o.num_gpus : 1;
  if (auto status = sim::validate(par, profile); !status) fail(kExitBadInput, status.error_message());
  const std::int32_t max_model_len = o.max_model_len.value_or(profile.max_position_embeddings);
  if (max_model_len > profile.max_position_embeddings) {
    fail(kExitBadInput, "--max-model-len " + std::to_string(max_model_len) + " exceeds " + profile.name + "'s " +
                            std::to_string(profile.max_position_embeddings) + " positions");
  }
  const auto dtype = o.kv_cache_dtype == "auto" ? sim::KvCacheDtype::kAuto : sim::KvCacheDtype::kFp8;
  if (dtype == sim::KvCacheDtype::kFp8) {
    auto fp8 = sim::with_fp8_kv_cache(profile);
    if (!fp8) fail(kExitBadInput, fp8.error_message());
    profile = std::move(fp8).value();
  }
  const std::int32_t block_size = block_size_for(o, profile);
  // DeepSeek-V4's bytes as served depend on the block size (each block keeps
  // one window and its pool states): priced at the one asked for.
  const double served_bytes_per_token =
      profile.kv_bytes_per_token_served ? profile.kv_bytes_per_token_served(block_size, dtype) : 0.0;
  const sim::MemoryOptions memory_options{.gpu_memory_utilization = o.gpu_memory_utilization,
                                          .kv_cache_dtype = dtype,
                                          .max_num_seqs = o.max_num_seqs,
                                          .max_num_batched_tokens = o.max_num_batched_tokens,
                                          .block_size_tokens = block_size,
                                          .max_model_len_tokens = max_model_len};
  const sim::MemoryPlan mem = sim::plan_memory(profile, hardware, par, memory_options);
  // Everything the workload run needs is checked before anything is printed:
  // the engine's settings against the backend it will run on (when the model
  // fits at all), and the workload file.
  const EngineConfig config = engine_config(o, max_model_len);
  std::unique_ptr<sim::SimBackend> backend;
  std::unique_ptr<Backend> lane;  // --decode-lane's
  if (mem.fits()) {
    auto made = sim::make_sim_backend(profile, hardware, par,
                                      {.memory = memory_options, .max_model_len_tokens = max_model_len});
    if (!made) fail(kExitBadInput, made.error_message());
    backend = std::move(made).value();
    SLUICE_CHECK_EQ(backend->info().num_kv_blocks, mem.num_kv_blocks);
    if (auto status = validate(config, backend->info()); !status) fail(kExitBadInput, status.error_message());
    // The sim's lane (sim_backend.h): the decodes priced on their SMs, the prefill on the rest.
    auto made_lane = make_decode_lane(*backend, config);
    if (!made_lane) fail(kExitBadInput, made_lane.error_message());
    lane = std::move(made_lane).value();
  }
  const Workload workload = load_workload(o, max_model_len);

  std::printf("sluice plan: %s on %d x %s (tensor parallel %d, expert parallel %d, %d attention replica%s)\n",
              profile.name.c_str(), par.num_gpus, hardware.name.c_str(), par.tensor_parallel, par.expert_parallel,
              par.data_parallel(), par.data_parallel() == 1 ? "" : "s");
  std::printf("  profile: %s\n", profile.source.c_str());
  std::printf("model\n");
  std::printf("  parameters        %.1fB on GPU; active %.2fB per prompt token, %.2fB per output token\n",
              profile.total_params() / 1e9, profile.active_params_per_prompt_token() / 1e9,
              profile.active_params_per_output_token() / 1e9);
  std::printf("  KV cache          %.0f B per token (%s), whole model", profile.kv_bytes_per_token,
              o.kv_cache_dtype.c_str());
  if (profile.kv_window_tokens > 0) {
    std::printf("; plus %d-token window rings and compressor state, %.1f MB per sequence", profile.kv_window_tokens,
                profile.kv_state_bytes_per_sequence / 1e6);
  }
  std::printf("\n");
  if (served_bytes_per_token > 0)
    std::printf("  KV as served      sluice's CUDA server holds this cache in blocks of %d today (%s latents, e4m3 "
                "index keys): %.0f B per token (%.1fx the layout above, which the capacity below assumes)\n",
                block_size, dtype == sim::KvCacheDtype::kFp8 ? "fp8_ds_mla" : "bf16", served_bytes_per_token,
                served_bytes_per_token / profile.kv_bytes_per_token);
  std::printf("memory per GPU (budget %.1f GB = %.1f GB x %.2f)\n", gb(mem.budget_bytes),
              gb(hardware.hbm_capacity_bytes), o.gpu_memory_utilization);
  std::printf("  weights           %8.1f GB\n", gb(mem.weight_bytes));
  std::printf("  activations       %8.1f GB  (%d batched tokens, %d sequences, max length %d)\n",
              gb(mem.activation_bytes), o.max_num_batched_tokens, o.max_num_seqs, max_model_len);
  std::printf("  sequence state    %8.1f GB\n", gb(mem.sequence_state_bytes));
  std::printf("  KV cache          %8.1f GB  (%.0f B per token on this GPU)\n", gb(mem.kv_bytes),
              mem.kv_bytes_per_token);
  if (profile.host_table_bytes > 0) {
    std::printf("host memory\n");
    std::printf("  host tables       %8.1f GB  (Engram, in host RAM; %.0f B fetched per token over %.0f GB/s)\n",
                gb(profile.host_table_bytes), profile.host_bytes_per_token, gb(hardware.host_link_bytes_per_s));
  }

  if (!mem.fits()) {
    std::printf("DOES NOT FIT: %s\n", sim::describe_shortfall(mem).c_str());
    throw CLI::RuntimeError(kExitDoesNotFit);
  }
  std::printf("KV capacity         %lld tokens (%d blocks of %d)\n", static_cast<long long>(mem.kv_capacity_tokens),
              mem.num_kv_blocks, block_size);
  if (served_bytes_per_token > 0 && par.num_gpus == 1)
    std::printf("  as served today  %lld tokens in the same %.1f GB (sluice's CUDA server, one GPU)\n",
                static_cast<long long>(mem.kv_bytes / served_bytes_per_token), gb(mem.kv_bytes));
  const std::int64_t per_replica_tokens = mem.kv_capacity_tokens / par.data_parallel();
  if (per_replica_tokens < max_model_len) {
    std::printf("DOES NOT FIT: one sequence of --max-model-len %d tokens needs more KV than an attention replica "
                "holds (%lld tokens)\n",
                max_model_len, static_cast<long long>(per_replica_tokens));
    throw CLI::RuntimeError(kExitDoesNotFit);
  }
  std::printf("concurrency (sequences whose full context fits; capped by --max-num-seqs %d)\n", o.max_num_seqs);
  for (std::int32_t context : {8192, 32768, 131072, 262144, 1048576}) {
    if (context >= max_model_len) break;
    const std::int64_t n = mem.kv_capacity_tokens / context;
    std::printf("  at %8d tokens  %6lld  -> %lld\n", context, static_cast<long long>(n),
                static_cast<long long>(std::min<std::int64_t>(n, o.max_num_seqs)));
  }
  const std::int64_t at_max = mem.kv_capacity_tokens / max_model_len;
  std::printf("  at %8d tokens  %6lld  -> %lld  (max-model-len)\n", max_model_len, static_cast<long long>(at_max),
              static_cast<long long>(std::min<std::int64_t>(at_max, o.max_num_seqs)));

  const auto cost_model = std::make_shared<const sim::RooflineCostModel>(profile, hardware, par);
  print_step_times(*cost_model, max_model_len, o.max_num_seqs);

  Engine engine(std::move(backend), cost_model, config, std::move(lane));
  const sim::ReplayOutcome outcome = replay_workload(engine, workload.requests);
  print_workload(workload, outcome, workload.requests.size() <= 64);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "predict memory, KV capacity and latency for a model on H200s");
  auto* model = cmd->add_option("--model", o->model_dir, "Hugging Face model directory (config.json)");
  auto* profile = cmd->add_option("--profile", o->profile_name, "built-in profile (see --list-profiles)");
  model->excludes(profile);
  cmd->add_flag("--list-profiles", o->list_profiles, "name the built-in profiles and exit");
  cmd->add_option("--gpus", o->num_gpus, "GPUs in the instance")->check(CLI::Range(1, 1024));
  cmd->add_option("--gpu", o->gpu,
                  "h200 (default) or h100: an H100 SXM is the H200's measured spec at its 3.35 TB/s and 80 GB, the "
                  "same compute")
      ->check(CLI::IsMember({"h200", "h100"}));
  cmd->add_option("--tensor-parallel-size", o->tensor_parallel, "default: --gpus")->check(CLI::Range(1, 1024));
  cmd->add_flag("--expert-parallel,--enable-expert-parallel", o->expert_parallel,
                "split routed experts over all GPUs (MoE models only)");
  cmd->add_option("--max-model-len", o->max_model_len, "default: the model's maximum")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--max-num-seqs", o->max_num_seqs)->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-num-batched-tokens", o->max_num_batched_tokens)->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--gpu-memory-utilization", o->gpu_memory_utilization)->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--kv-cache-dtype", o->kv_cache_dtype, "auto | fp8 (fp8_e4m3 and fp8_ds_mla name it too, as in serve)")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3", "fp8_ds_mla"}));
  cmd->add_option("--block-size", o->block_size, "KV block size in tokens (default 16, or a multiple of the model's "
                                                 "compression windows)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--workload", o->workload_path, "JSONL with input_length, output_length[, timestamp ms]")
      ->check(CLI::ExistingFile);
  cmd->add_option("--num-requests", o->num_requests, "use the first N requests of --workload")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  cmd->add_option("--max-step-ms", o->max_step_ms, "predicted step-time target (inter-token latency)")
      ->check(CLI::Range(0.1, 1e6));
  cmd->add_option("--decode-lane", o->decode_lane,
                  "off | sms:N: the workload with serve's two step loops, the decodes on N of the GPU's SMs and the "
                  "prefill on the rest (one GPU)");
  cmd->add_option("--decode-lane-max-context", o->decode_lane_max_context,
                  "as serve's: the longest context a decode on the decode lane may have (0 = from the cost model)");
  cmd->add_option("--decode-lane-interval-ms", o->decode_lane_interval_ms,
                  "as serve's: the least time between the starts of two decode-lane steps (default 40 with a decode "
                  "lane; 0 = back to back)");
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace sluice::cli
