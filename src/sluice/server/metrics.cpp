#include "sluice/server/metrics.h"

#include <fmt/format.h>

namespace sluice::server {
namespace {

// vLLM's buckets for the same histograms, so bucketed dashboards line up.
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
          2.5,   5.0,   7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
          120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// The server's share of TTFT is meant to stay under a millisecond.
std::vector<double> overhead_buckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0};
}
// Powers of two up to the largest --max-num-batched-tokens anyone sets.
std::vector<double> chunk_buckets() {
  std::vector<double> bounds;
  for (double b = 1; b <= 65536; b *= 2) bounds.push_back(b);
  return bounds;
}

constexpr std::array<const char*, 4> kOutcomeNames = {"stop", "length", "abort", "error"};

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::size_t bucket = 0;
  while (bucket < upper_bounds_.size() && value > upper_bounds_[bucket]) ++bucket;
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

std::uint64_t Histogram::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mutex_);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < upper_bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, upper_bounds_[i], cumulative);
  }
  cumulative += counts_.back();
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cumulative);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum_);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

ServerMetrics::ServerMetrics()
    : ttft_seconds_(ttft_buckets()),
      itl_seconds_(itl_buckets()),
      e2e_seconds_(e2e_buckets()),
      ttft_server_overhead_seconds_(overhead_buckets()),
      prefill_chunk_tokens_(chunk_buckets()),
      queue_seconds_(e2e_buckets()),
      prefill_seconds_(e2e_buckets()) {}

void ServerMetrics::observe_timelines(const std::vector<RequestTimeline>& timelines) {
  for (const RequestTimeline& t : timelines) {
    for (const RequestTimeline::Chunk& chunk : t.prefill_chunks) prefill_chunk_tokens_.observe(chunk.num_tokens);
    if (t.admitted_ms) queue_seconds_.observe((*t.admitted_ms - t.arrival_ms) / 1e3);
    if (t.admitted_ms && t.first_token_ms) prefill_seconds_.observe((*t.first_token_ms - *t.admitted_ms) / 1e3);
  }
}

void ServerMetrics::observe_request_finished(RequestOutcome outcome, double e2e_seconds,
                                             std::int64_t num_prompt_tokens, std::int64_t num_generation_tokens) {
  finished_[static_cast<std::size_t>(outcome)] += 1;
  e2e_seconds_.observe(e2e_seconds);
  prompt_tokens_ += num_prompt_tokens;
  generation_tokens_ += num_generation_tokens;
}

void ServerMetrics::count_rejected(int http_status) { (http_status >= 500 ? rejected_5xx_ : rejected_4xx_) += 1; }

std::string ServerMetrics::render(const EngineStats& stats, const std::string& model_name) const {
  const std::string labels = fmt::format("model_name=\"{}\"", model_name);
  std::string out;
  out.reserve(8192);
  auto gauge = [&](const char* name, const char* help, double value) {
    header(out, name, "gauge", help);
    out += fmt::format("{}{{{}}} {}\n", name, labels, value);
  };
  auto counter = [&](const char* name, const char* help, double value) {
    header(out, name, "counter", help);
    out += fmt::format("{}{{{}}} {}\n", name, labels, value);
  };
  gauge("vllm:num_requests_running", "Requests in the running batch.", stats.num_running);
  gauge("vllm:num_requests_waiting", "Requests waiting to be admitted.", stats.num_waiting);
  gauge("vllm:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0-1).", stats.kv_usage);
  counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(stats.prefix_cache_queried_tokens));
  counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          static_cast<double>(stats.prefix_cache_hit_tokens));
  // vLLM's names for prefix hits served by its KV connector (the offloading tier).
  counter("vllm:external_prefix_cache_queries_total", "Prompt tokens looked up in the host KV tier (device misses).",
          static_cast<double>(stats.host_cache_queried_tokens));
  counter("vllm:external_prefix_cache_hits_total", "Prompt tokens loaded from the host KV tier.",
          static_cast<double>(stats.host_cache_hit_tokens));
  counter("vllm:num_preemptions_total", "Preemptions.", static_cast<double>(stats.num_preemptions));
  counter("sluice:async_dropped_sequence_steps_total",
          "Async scheduling: sequence-steps computed for requests that ended while they were in flight.",
          static_cast<double>(stats.num_dropped_sequence_steps));
  counter("sluice:async_pipeline_waits_total",
          "Async scheduling: steps that waited for the step in flight before planning (preemptions).",
          static_cast<double>(stats.num_pipeline_waits));
  counter("sluice:long_steps_total",
          "Steps planned past --max-step-ms beside decodes (up to --max-token-gap-ms) to amortize a chunk's fixed "
          "cost, each paid back by decode steps after it.",
          static_cast<double>(stats.num_long_steps));
  counter("vllm:prompt_tokens_total", "Prompt tokens of finished requests.", static_cast<double>(prompt_tokens_.load()));
  counter("vllm:generation_tokens_total", "Generated tokens of finished requests.",
          static_cast<double>(generation_tokens_.load()));
  header(out, "vllm:request_success_total", "counter", "Finished requests by finish reason.");
  for (std::size_t i = 0; i < kOutcomeNames.size(); ++i)
    out += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", labels, kOutcomeNames[i],
                       finished_[i].load());
  header(out, "vllm:time_to_first_token_seconds", "histogram", "Time to first token, from request arrival.");
  ttft_seconds_.render(out, "vllm:time_to_first_token_seconds", labels);
  header(out, "vllm:inter_token_latency_seconds", "histogram", "Time between consecutive tokens of a request.");
  itl_seconds_.render(out, "vllm:inter_token_latency_seconds", labels);
  header(out, "vllm:e2e_request_latency_seconds", "histogram", "Request latency, arrival to last token.");
  e2e_seconds_.render(out, "vllm:e2e_request_latency_seconds", labels);
  header(out, "vllm:request_queue_time_seconds", "histogram", "Time waiting before the engine admitted the request.");
  queue_seconds_.render(out, "vllm:request_queue_time_seconds", labels);
  header(out, "vllm:request_prefill_time_seconds", "histogram", "Admission to first token.");
  prefill_seconds_.render(out, "vllm:request_prefill_time_seconds", labels);
  header(out, "sluice:prefill_chunk_tokens", "histogram", "Prompt tokens per prefill chunk (one request, one step).");
  prefill_chunk_tokens_.render(out, "sluice:prefill_chunk_tokens", labels);
  header(out, "sluice:time_to_first_token_server_overhead_seconds", "histogram",
         "Time to first token less tokenization and the engine's queue and prefill time: the server's own share.");
  ttft_server_overhead_seconds_.render(out, "sluice:time_to_first_token_server_overhead_seconds", labels);

  counter("sluice:engine_steps_total", "Engine steps run.", static_cast<double>(stats.num_steps));
  counter("sluice:step_time_seconds_total", "Time spent in engine steps.", stats.total_step_ms / 1e3);
  gauge("sluice:last_step_seconds", "Duration of the latest engine step.", stats.last_step_ms / 1e3);
  gauge("sluice:max_step_seconds", "Longest engine step so far.", stats.max_step_ms_seen / 1e3);
  header(out, "sluice:cost_model_correction", "gauge",
         "Measured over predicted step time, per cost-model term, as the online correction has learned it.");
  {
    static constexpr const char* kTerms[] = {"gemm_compute", "gemm_memory", "attention_compute", "attention_memory",
                                             "fixed"};
    for (std::size_t i = 0; i < stats.cost_correction_factors.size(); ++i)
      out += fmt::format("sluice:cost_model_correction{{{},term=\"{}\"}} {}\n", labels, kTerms[i],
                         stats.cost_correction_factors[i]);
  }
  gauge("sluice:longest_current_decode_stall_seconds",
        "Longest time since its previous token of any request now decoding.",
        stats.longest_current_decode_stall_ms / 1e3);
  gauge("sluice:num_queued_prompt_tokens", "Prompt tokens of waiting requests.",
        static_cast<double>(stats.num_queued_prompt_tokens));
  gauge("sluice:num_kv_blocks", "KV cache blocks in the pool.", stats.num_kv_blocks);
  gauge("sluice:num_free_kv_blocks", "Unused KV cache blocks (cached or not).", stats.num_free_kv_blocks);
  gauge("sluice:num_cached_free_kv_blocks", "Unused KV blocks that still hold a reusable prefix.",
        stats.num_cached_free_kv_blocks);
  // One series per cache tier and block state (device, host; a disk tier adds its own).
  const std::int32_t used_blocks = stats.num_kv_blocks - stats.num_free_kv_blocks;
  const std::int32_t uncached_free_blocks = stats.num_free_kv_blocks - stats.num_cached_free_kv_blocks;
  // One sample of a per-tier series; `extra` adds labels after the tier's.
  auto tier_sample = [&](const char* name, const char* tier, const char* extra, double value) {
    out += fmt::format("{}{{{},tier=\"{}\"{}}} {}\n", name, labels, tier, extra, value);
  };
  const bool host = stats.num_host_kv_blocks > 0;
  header(out, "sluice:kv_cache_tier_blocks", "gauge",
         "KV blocks per cache tier: used (held by requests or copies), cached (free, holding a prefix), free.");
  tier_sample("sluice:kv_cache_tier_blocks", "device", ",state=\"used\"", used_blocks);
  tier_sample("sluice:kv_cache_tier_blocks", "device", ",state=\"cached\"", stats.num_cached_free_kv_blocks);
  tier_sample("sluice:kv_cache_tier_blocks", "device", ",state=\"free\"", uncached_free_blocks);
  if (host) tier_sample("sluice:kv_cache_tier_blocks", "host", ",state=\"cached\"", stats.num_host_stored_kv_blocks);
  header(out, "sluice:kv_cache_tier_capacity_blocks", "gauge", "KV blocks each cache tier can hold.");
  tier_sample("sluice:kv_cache_tier_capacity_blocks", "device", "", stats.num_kv_blocks);
  if (host) tier_sample("sluice:kv_cache_tier_capacity_blocks", "host", "", stats.num_host_kv_blocks);
  header(out, "sluice:kv_cache_tier_hit_tokens_total", "counter", "Prompt tokens served from each cache tier.");
  tier_sample("sluice:kv_cache_tier_hit_tokens_total", "device", "", static_cast<double>(stats.prefix_cache_hit_tokens));
  if (host) tier_sample("sluice:kv_cache_tier_hit_tokens_total", "host", "", static_cast<double>(stats.host_cache_hit_tokens));
  header(out, "sluice:kv_cache_tier_hit_queries_total", "counter",
         "Prompts whose prefix came partly from each cache tier.");
  tier_sample("sluice:kv_cache_tier_hit_queries_total", "device", "",
              static_cast<double>(stats.prefix_cache_device_hit_queries));
  if (host) {
    tier_sample("sluice:kv_cache_tier_hit_queries_total", "host", "",
                static_cast<double>(stats.prefix_cache_host_hit_queries));
    counter("sluice:kv_host_loaded_blocks_total", "KV blocks loaded from the host tier (promotions started).",
            static_cast<double>(stats.host_loaded_blocks));
    counter("sluice:kv_host_stored_blocks_total", "KV blocks stored to the host tier (demotions completed).",
            static_cast<double>(stats.host_stored_blocks));
    counter("sluice:kv_host_swapped_out_blocks_total",
            "KV blocks of preempted requests stored to the host tier (swap-outs started).",
            static_cast<double>(stats.host_swapped_out_blocks));
    counter("sluice:num_preemptions_swapped_total", "Preemptions that swapped to the host tier instead of recomputing.",
            static_cast<double>(stats.num_swap_preemptions));
    counter("sluice:kv_host_evicted_blocks_total", "KV blocks evicted from the host tier.",
            static_cast<double>(stats.host_evicted_blocks));
    counter("sluice:kv_host_loaded_bytes_total", "Bytes copied host to device.",
            static_cast<double>(stats.host_loaded_bytes));
    counter("sluice:kv_host_stored_bytes_total", "Bytes copied device to host.",
            static_cast<double>(stats.host_stored_bytes));
    counter("sluice:kv_host_loads_total", "Requests whose prefix finished loading from the host tier.",
            static_cast<double>(stats.host_num_loads));
    counter("sluice:kv_host_load_seconds_total",
            "Admission to the last load's completion, summed over the loads (mean = this / loads).",
            stats.host_load_ms_total / 1e3);
    counter("sluice:kv_host_failed_copies_total", "Host tier copies that failed.",
            static_cast<double>(stats.host_failed_copies));
    counter("sluice:kv_host_hit_tokens_recomputed_total",
            "Prompt tokens found in the host tier but recomputed (the planner priced the copy above recomputing).",
            static_cast<double>(stats.host_hit_tokens_recomputed));
    counter("sluice:kv_host_demotions_skipped_total",
            "Device blocks evicted without reaching the host tier (admission refused, or no time to copy).",
            static_cast<double>(stats.host_demotions_skipped));
    gauge("sluice:kv_copies_in_flight", "Host tier copies started and not completed.",
          stats.num_kv_copies_in_flight);
  }
  counter("sluice:prefix_cache_evicted_blocks_total", "KV blocks evicted from the prefix cache.",
          static_cast<double>(stats.prefix_cache_evicted_blocks));
  counter("sluice:prefill_tokens_computed_total", "Prompt tokens actually computed (not served from cache).",
          static_cast<double>(stats.num_prompt_tokens_computed));
  counter("sluice:requests_aborted_total", "Requests the engine aborted (client gone, stop string, shutdown).",
          static_cast<double>(stats.num_requests_aborted));
  counter("sluice:requests_failed_total", "Requests that failed in the engine.",
          static_cast<double>(stats.num_requests_failed));
  counter("sluice:http_rejected_4xx_total", "Requests refused with a 4xx status.",
          static_cast<double>(rejected_4xx_.load()));
  counter("sluice:http_rejected_5xx_total", "Requests refused with a 5xx status.",
          static_cast<double>(rejected_5xx_.load()));
  gauge("sluice:http_connections_open", "HTTP connections whose socket is open (this /metrics request's included).",
        static_cast<double>(open_connections_.load()));
  return out;
}

}  // namespace sluice::server
