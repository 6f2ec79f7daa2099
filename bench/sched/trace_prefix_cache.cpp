// Prefix-cache hit rate on a production trace (Mooncake JSONL: timestamp,
// input_length, output_length, hash_ids of 512-token blocks) or on a synthetic
// agent-session workload (agent_sessions.h): LRU, SLRU, prefix-aware, reuse-history, adaptive-reuse, and the
// offline optimum (Belady).
//
//   trace_prefix_cache TRACE|synthetic[:SEED][+TRACE|synthetic[:SEED]...] [--kv-tokens N] [--max-requests N]
//                      [--half all|first|second] [--mode replay|engine|both]
//                      [--policies lru,slru,prefix-aware,reuse-history,adaptive-reuse] [--slru-protected FRACTION]
//                      [--prefix-hit-weight W]   (replay only; KvCacheConfig::prefix_hit_weight)
//                      [--reuse-seen-weight W] [--reuse-depth-weight B]   (replay only;
//                                                KvCacheConfig::reuse_seen_weight, reuse_depth_weight_blocks)
//                      [--host-kv-tokens N] [--host-min-hits H] [--host-eviction lru|slru|reuse-history|adaptive-reuse]
//                      [--block-size TOKENS]
//
// --host-kv-tokens: a host KV tier of N tokens below the --kv-tokens device
//         pool (replay: copies complete at once; engine: the sim's copy
//         engines at the H200's 55 GB/s x 0.9 per GPU, loads priced against
//         recompute by the planner). Hit rates then count tokens from either
//         tier; Belady gets both tiers' capacity as one cache.
// --block-size: the engine's KV block (16 by default; a hit covers whole
//         blocks, so larger blocks give back part of a hit: DeepSeek-V4's 1024).
// --host-min-hits: per-tier admission, device hits a block needs to be stored.
// --host-eviction: the host tier's order (KvCacheConfig::host_eviction; LRU by default).
//
// --half: the trace's first half (to develop a policy on) or second half (to
//         report on), replayed alone from an empty cache.
// A+B:    the workloads one after another (B's arrivals shifted past A's last,
//         its hash ids moved apart so no block is shared): a change of traffic
//         an adaptive policy must follow both ways. --half and --max-requests
//         apply to each; the hit rate is printed per part too.
// belady: evicts the cached 512-token block whose next use is furthest away
//         (requests one after another, as in replay): what no online policy can beat.
//
// replay: the KV manager alone, requests one after another in arrival order
//         (each request's blocks are freed when it is done): what eviction
//         alone decides, comparable with DESIGN.md's 4.8% for LRU at 0.7M tokens.
// engine: the whole engine on the DeepSeek-V4.1-Flash / 8xH200 sim backend
//         with that much KV, arrivals at the trace's timestamps: running
//         requests pin their blocks, so the cache holds less.
// Each hash id becomes a deterministic 512-token block, so equal ids give
// equal tokens and prefix sharing is real.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent_sessions.h"
#include "sluice/common/rng.h"
#include "sluice/engine/engine.h"
#include "sluice/kv/kv_cache_manager.h"
#include "sluice/sim/engine_replay.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/sim_backend.h"

namespace sluice {
namespace {

constexpr std::int32_t kTraceBlockTokens = 512;

std::vector<TraceRequest> load(const std::string& path, std::int64_t max_requests) {
  std::ifstream in(path);
  std::vector<TraceRequest> out;
  std::string line;
  while (std::getline(in, line) && (max_requests <= 0 || static_cast<std::int64_t>(out.size()) < max_requests)) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    TraceRequest r;
    r.arrival_ms = j.at("timestamp").get<double>();
    r.num_input_tokens = j.at("input_length").get<std::int32_t>();
    r.num_output_tokens = j.at("output_length").get<std::int32_t>();
    r.hash_ids = j.at("hash_ids").get<std::vector<std::uint64_t>>();
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<TokenId> tokens_of(const TraceRequest& r) {
  std::vector<TokenId> tokens;
  tokens.reserve(static_cast<std::size_t>(r.num_input_tokens));
  for (std::uint64_t id : r.hash_ids) {
    for (std::int32_t i = 0; i < kTraceBlockTokens && static_cast<std::int32_t>(tokens.size()) < r.num_input_tokens; ++i) {
      tokens.push_back(static_cast<TokenId>(splitmix64(id * 1024 + static_cast<std::uint64_t>(i)) % 32000));
    }
  }
  // input_length may exceed the ids' coverage: unique filler the cache cannot share.
  while (static_cast<std::int32_t>(tokens.size()) < r.num_input_tokens) {
    tokens.push_back(static_cast<TokenId>(splitmix64(0xf111e7 ^ (tokens.size() * 7919) ^
                                                     static_cast<std::uint64_t>(r.arrival_ms)) % 32000));
  }
  return tokens;
}

// Belady at the trace's block granularity: hit tokens / prompt tokens, with a
// request's blocks cached while it runs and the furthest-next-use block evicted
// beyond capacity.
double belady(const std::vector<TraceRequest>& trace, std::int64_t kv_tokens) {
  const auto capacity = static_cast<std::size_t>(kv_tokens / kTraceBlockTokens);
  constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
  std::map<std::uint64_t, std::vector<std::size_t>> uses;  // id -> request indices, ascending
  for (std::size_t t = 0; t < trace.size(); ++t) {
    for (std::uint64_t id : trace[t].hash_ids) uses[id].push_back(t);
  }
  std::map<std::uint64_t, std::size_t> seen;           // id -> uses so far
  std::map<std::uint64_t, std::size_t> cached_next;    // cached id -> its next use
  std::set<std::pair<std::size_t, std::uint64_t>> by_next;
  std::int64_t prompt = 0, hit = 0;
  for (const TraceRequest& r : trace) {
    prompt += r.num_input_tokens;
    const auto num_full = std::min(r.hash_ids.size(), static_cast<std::size_t>(r.num_input_tokens / kTraceBlockTokens));
    std::size_t k = 0;
    while (k < num_full && cached_next.contains(r.hash_ids[k])) ++k;
    hit += static_cast<std::int64_t>(k) * kTraceBlockTokens;
    for (std::size_t b = 0; b < num_full; ++b) {
      const std::uint64_t id = r.hash_ids[b];
      const std::size_t n = ++seen[id];
      const std::vector<std::size_t>& u = uses[id];
      const std::size_t next = n < u.size() ? u[n] : kNever;
      if (const auto it = cached_next.find(id); it != cached_next.end()) by_next.erase({it->second, id});
      cached_next[id] = next;
      by_next.insert({next, id});
    }
    while (cached_next.size() > capacity) {
      const auto victim = std::prev(by_next.end());
      cached_next.erase(victim->second);
      by_next.erase(victim);
    }
  }
  return static_cast<double>(hit) / static_cast<double>(prompt);
}

// The first request of each part of an A+B workload (0 alone for one).
std::vector<std::size_t> g_part_starts = {0};

std::size_t part_of(std::size_t request) {
  return static_cast<std::size_t>(std::upper_bound(g_part_starts.begin(), g_part_starts.end(), request) -
                                  g_part_starts.begin()) - 1;
}

// "  (parts: 82.10% 9.05%)" when the workload has more than one part.
std::string parts_line(const std::vector<std::int64_t>& hit, const std::vector<std::int64_t>& queried) {
  if (hit.size() < 2) return "";
  std::string line = " (parts:";
  for (std::size_t p = 0; p < hit.size(); ++p) {
    char cell[32];
    std::snprintf(cell, sizeof cell, " %.2f%%", 100.0 * static_cast<double>(hit[p]) / static_cast<double>(std::max<std::int64_t>(1, queried[p])));
    line += cell;
  }
  return line + ")";
}
std::string g_last_parts;

double g_prefix_hit_weight = KvCacheConfig{}.prefix_hit_weight;
double g_reuse_seen_weight = KvCacheConfig{}.reuse_seen_weight;
double g_reuse_depth_weight = KvCacheConfig{}.reuse_depth_weight_blocks;
std::int64_t g_host_kv_tokens = 0;
std::int32_t g_block_tokens = 16;  // the engine's KV block (--block-size)
std::int32_t g_host_min_hits = 0;
EvictionPolicy g_host_eviction = EvictionPolicy::kLru;
std::string g_host_eviction_name = "lru";

void complete_copies(KvCacheManager& kv) {
  for (const KvBlockCopy& c : kv.take_new_copies()) kv.complete_copy({.id = c.id});
}

double replay(const std::vector<TraceRequest>& trace, std::int64_t kv_tokens, EvictionPolicy eviction,
              double protected_fraction) {
  KvCacheManager kv({.num_blocks = static_cast<std::int32_t>(kv_tokens / g_block_tokens),
                     .block_size_tokens = g_block_tokens,
                     .eviction = eviction,
                     .slru_protected_fraction = protected_fraction,
                     .prefix_hit_weight = g_prefix_hit_weight,
                     .reuse_seen_weight = g_reuse_seen_weight,
                     .reuse_depth_weight_blocks = g_reuse_depth_weight,
                     .num_host_blocks = static_cast<std::int32_t>(g_host_kv_tokens / g_block_tokens),
                     .host_eviction = g_host_eviction,
                     .host_admission = {.min_hits = g_host_min_hits}});
  std::int64_t queried = 0, hit = 0;
  std::vector<std::int64_t> part_queried(g_part_starts.size(), 0), part_hit(g_part_starts.size(), 0);
  SequenceId id = 0;
  for (std::size_t t = 0; t < trace.size(); ++t) {
    const TraceRequest& r = trace[t];
    const std::vector<TokenId> tokens = tokens_of(r);
    std::vector<BlockHash> hashes;
    extend_block_hashes(hashes, tokens, g_block_tokens, 0);
    const auto n = static_cast<std::int32_t>(tokens.size());
    if (n / g_block_tokens + 1 > kv.num_blocks()) continue;
    // Room for the whole prompt is made through the host tier (the engine
    // makes it a step at a time); then the prefix is matched on both tiers.
    const std::int32_t num_device_hit_blocks = static_cast<std::int32_t>(kv.match_prefix(hashes, n - 1).blocks.size());
    kv.start_demotions(kv.num_blocks_needed(id + 1, n, num_device_hit_blocks));
    complete_copies(kv);
    PrefixMatch match = kv.match_prefix(hashes, n - 1);
    queried += n;
    const std::int64_t num_hit_tokens =
        match.num_cached_tokens + static_cast<std::int64_t>(match.host_blocks.size()) * g_block_tokens;
    hit += num_hit_tokens;
    part_queried[part_of(t)] += n;
    part_hit[part_of(t)] += num_hit_tokens;
    const Status s = kv.commit({.seq_id = ++id, .num_tokens = n, .prefix = std::move(match), .num_queried_tokens = n});
    if (!s.ok()) continue;
    complete_copies(kv);
    kv.cache_computed_blocks(id, hashes, n);
    kv.free(id);
  }
  if (eviction == EvictionPolicy::kPrefixAware) {
    std::printf("  (prefix-aware admission window at the end: %d tokens)\n",
                kv.pool().admit_window_blocks() * g_block_tokens);
  }
  if (const LruCounterfactual* c = kv.pool().counterfactual()) {
    std::printf("  (adaptive reuse: scale %.3f at the end; device hits %lld blocks, the shadow LRU's %lld, the reuse "
                "shadow's %lld)\n",
                c->scale(), static_cast<long long>(c->num_hit_blocks()), static_cast<long long>(c->num_lru_hit_blocks()),
                static_cast<long long>(c->num_reuse_shadow_hit_blocks()));
  }
  if (const LruCounterfactual* c = kv.host_counterfactual()) {
    std::printf("  (host adaptive reuse: scale %.3f at the end; hits on both tiers %lld blocks, the shadow LRU's %lld, "
                "the reuse shadow's %lld)\n",
                c->scale(), static_cast<long long>(c->num_hit_blocks()), static_cast<long long>(c->num_lru_hit_blocks()),
                static_cast<long long>(c->num_reuse_shadow_hit_blocks()));
  }
  g_last_parts = parts_line(part_hit, part_queried);
  return static_cast<double>(hit) / static_cast<double>(queried);
}

struct EngineResult {
  double hit_rate = 0.0;
  double host_hit_rate = 0.0;  // of prompt tokens, loaded from the host tier
  double mean_load_ms = 0.0;
  std::int64_t host_loaded_gb = 0;
  std::int64_t host_stored_gb = 0;
  double mean_ttft_ms = 0.0;
  std::int64_t num_done = 0;
  std::int64_t num_rejected = 0;
  std::int64_t num_preemptions = 0;
  double sim_seconds = 0.0;
  // Why the two tiers hold less than one cache of their size would: device
  // keys evicted without reaching the host, host evictions, and host hits
  // the planner recomputed (of prompt tokens).
  std::int64_t demotions_skipped = 0;
  std::int64_t evicted_past_admitting = 0, evicted_past_growing = 0, evicted_past_while_demoting = 0;
  std::int64_t host_evicted_blocks = 0;
  double host_recomputed_rate = 0.0;
  // Prompt tokens running requests held, averaged over the run (Little's law:
  // each request holds its prompt from admission to finish): the device cache
  // is what is left of the pool, which Belady's replay order does not see.
  double mean_pinned_prompt_tokens = 0.0;
};

EngineResult through_engine(const std::vector<TraceRequest>& trace, std::int64_t kv_tokens, EvictionPolicy eviction,
                            double protected_fraction) {
  const sim::ModelProfile profile = *sim::find_profile("deepseek-v4.1-flash");
  const sim::Parallelism parallelism{.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8};
  sim::SimBackendOptions options;
  options.max_model_len_tokens = 1 << 20;
  options.memory.block_size_tokens = g_block_tokens;
  options.num_kv_blocks_override = static_cast<std::int32_t>(kv_tokens / g_block_tokens);
  auto backend = sim::make_sim_backend(profile, sim::h200(), parallelism, options);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.error_message().c_str());
    return {};
  }
  EngineConfig config;
  config.eviction = eviction;
  config.slru_protected_fraction = protected_fraction;
  config.max_model_len_tokens = 1 << 20;
  config.max_step_ms = 50.0;
  config.clock = ClockMode::kVirtual;
  config.kv_offloading_bytes = g_host_kv_tokens / g_block_tokens * (*backend)->info().kv_bytes_per_block;
  config.kv_offloading_admission.min_hits = g_host_min_hits;
  config.kv_offloading_eviction = g_host_eviction;
  Engine engine(std::move(backend).value(),
                std::make_shared<sim::RooflineCostModel>(profile, sim::h200(), parallelism), config);
  std::vector<double> arrival_ms;
  for (const TraceRequest& r : trace) arrival_ms.push_back(r.arrival_ms - trace.front().arrival_ms);
  const auto make_request = [&](std::size_t i) {
    EngineRequest r;
    r.request_id = std::to_string(i);
    r.prompt_token_ids = tokens_of(trace[i]);
    r.max_tokens = std::max(1, trace[i].num_output_tokens);
    r.ignore_eos = true;
    return r;
  };
  const sim::ReplayOutcome replayed = sim::replay(engine, arrival_ms, make_request, /*max_steps=*/100'000'000);
  EngineResult result;
  std::int64_t prompt_tokens = 0, cached_tokens = 0;
  std::vector<std::int64_t> part_prompt(g_part_starts.size(), 0), part_cached(g_part_starts.size(), 0);
  double ttft_total = 0.0;
  for (const auto& [id, t] : replayed.timelines) {
    ++result.num_done;
    prompt_tokens += t.num_prompt_tokens;
    cached_tokens += t.num_cached_tokens;
    part_prompt[part_of(std::stoull(id))] += t.num_prompt_tokens;
    part_cached[part_of(std::stoull(id))] += t.num_cached_tokens;
    if (t.first_token_ms) ttft_total += *t.first_token_ms - t.arrival_ms;
    if (t.admitted_ms && t.finish_ms) {
      result.mean_pinned_prompt_tokens += static_cast<double>(t.num_prompt_tokens) * (*t.finish_ms - *t.admitted_ms);
    }
  }
  result.num_rejected = replayed.num_rejected();
  result.hit_rate = static_cast<double>(cached_tokens) / static_cast<double>(prompt_tokens);
  g_last_parts = parts_line(part_cached, part_prompt);
  result.mean_ttft_ms = ttft_total / static_cast<double>(result.num_done);
  result.num_preemptions = replayed.stats.num_preemptions;
  result.host_hit_rate =
      static_cast<double>(replayed.stats.host_cache_hit_tokens) / static_cast<double>(prompt_tokens);
  result.mean_load_ms = replayed.stats.host_num_loads > 0
                            ? replayed.stats.host_load_ms_total / static_cast<double>(replayed.stats.host_num_loads)
                            : 0.0;
  result.host_loaded_gb = replayed.stats.host_loaded_bytes / 1'000'000'000;
  result.host_stored_gb = replayed.stats.host_stored_bytes / 1'000'000'000;
  result.sim_seconds = replayed.stats.now_ms / 1000.0;
  if (replayed.stats.now_ms > 0.0) result.mean_pinned_prompt_tokens /= replayed.stats.now_ms;
  result.demotions_skipped = replayed.stats.host_demotions_skipped;
  result.evicted_past_admitting = replayed.stats.host_evicted_past_admitting;
  result.evicted_past_growing = replayed.stats.host_evicted_past_growing;
  result.evicted_past_while_demoting = replayed.stats.host_evicted_past_while_demoting;
  result.host_evicted_blocks = replayed.stats.host_evicted_blocks;
  result.host_recomputed_rate =
      static_cast<double>(replayed.stats.host_hit_tokens_recomputed) / static_cast<double>(prompt_tokens);
  return result;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  using namespace sluice;
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s TRACE|synthetic[:SEED] [--kv-tokens N] [--max-requests N] [--half all|first|second] "
                 "[--mode replay|engine|both] [--policies lru,slru,prefix-aware] [--slru-protected F] "
                 "[--prefix-hit-weight W] [--reuse-seen-weight W] [--reuse-depth-weight B] [--host-kv-tokens N] "
                 "[--host-min-hits H] [--host-eviction lru|slru|reuse-history|adaptive-reuse]\n",
                 argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  std::int64_t kv_tokens = 700000, max_requests = 0;
  double protected_fraction = EngineConfig{}.slru_protected_fraction;
  std::string mode = "both", half = "all", policies = "lru,slru,prefix-aware";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--kv-tokens") {
      kv_tokens = std::stoll(argv[i + 1]);
    } else if (flag == "--max-requests") {
      max_requests = std::stoll(argv[i + 1]);
    } else if (flag == "--slru-protected") {
      protected_fraction = std::stod(argv[i + 1]);
    } else if (flag == "--mode") {
      mode = argv[i + 1];
    } else if (flag == "--half") {
      half = argv[i + 1];
    } else if (flag == "--prefix-hit-weight") {
      g_prefix_hit_weight = std::stod(argv[i + 1]);
    } else if (flag == "--reuse-seen-weight") {
      g_reuse_seen_weight = std::stod(argv[i + 1]);
    } else if (flag == "--reuse-depth-weight") {
      g_reuse_depth_weight = std::stod(argv[i + 1]);
    } else if (flag == "--block-size") {
      g_block_tokens = static_cast<std::int32_t>(std::stol(argv[i + 1]));
      if (g_block_tokens <= 0) {
        std::fprintf(stderr, "--block-size must be a positive number of tokens\n");
        return 2;
      }
    } else if (flag == "--host-kv-tokens") {
      g_host_kv_tokens = std::stoll(argv[i + 1]);
    } else if (flag == "--host-min-hits") {
      g_host_min_hits = std::stoi(argv[i + 1]);
    } else if (flag == "--host-eviction") {
      Result<EvictionPolicy> host_eviction = parse_eviction_policy(argv[i + 1]);
      if (!host_eviction.ok() || *host_eviction == EvictionPolicy::kPrefixAware) {
        std::fprintf(stderr, "--host-eviction must be lru, slru, reuse-history or adaptive-reuse\n");
        return 2;
      }
      g_host_eviction = *host_eviction;
      g_host_eviction_name = argv[i + 1];
    } else if (flag == "--policies") {
      policies = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::vector<TraceRequest> trace;
  g_part_starts.clear();
  std::stringstream parts(path);
  for (std::string part; std::getline(parts, part, '+');) {
    std::vector<TraceRequest> one;
    if (part.starts_with("synthetic")) {
      AgentSessionsOptions options;
      if (part.size() > 10) options.seed = std::stoull(part.substr(10));
      one = agent_sessions(options);
      if (max_requests > 0 && static_cast<std::int64_t>(one.size()) > max_requests) one.resize(static_cast<std::size_t>(max_requests));
    } else {
      one = load(part, max_requests);
    }
    if (half == "first") {
      one.resize(one.size() / 2);
    } else if (half == "second") {
      one.erase(one.begin(), one.begin() + static_cast<std::ptrdiff_t>(one.size() / 2));
    } else if (half != "all") {
      std::fprintf(stderr, "--half must be all, first or second\n");
      return 2;
    }
    if (one.empty()) continue;
    // Later parts start a second after the last arrival so far, with hash ids of their own.
    const double shift_ms = trace.empty() ? -one.front().arrival_ms : trace.back().arrival_ms + 1000.0 - one.front().arrival_ms;
    const std::uint64_t id_offset = static_cast<std::uint64_t>(g_part_starts.size()) << 40;
    g_part_starts.push_back(trace.size());
    for (TraceRequest& r : one) {
      r.arrival_ms += shift_ms;
      for (std::uint64_t& h : r.hash_ids) h += id_offset;
      trace.push_back(std::move(r));
    }
  }
  if (g_part_starts.empty()) g_part_starts.push_back(0);
  std::int64_t prompt_tokens = 0;
  for (const TraceRequest& r : trace) prompt_tokens += r.num_input_tokens;
  std::printf("%s (%s): %zu requests, %lld prompt tokens, KV %lld tokens + host tier %lld tokens (min hits %d, "
              "eviction %s)\n",
              path.c_str(), half.c_str(), trace.size(), static_cast<long long>(prompt_tokens),
              static_cast<long long>(kv_tokens), static_cast<long long>(g_host_kv_tokens), g_host_min_hits,
              g_host_eviction_name.c_str());
  std::printf("belady       : %.2f%% of prompt tokens from cache (offline optimum over both tiers, replay order)\n",
              100.0 * belady(trace, kv_tokens + g_host_kv_tokens));
  std::stringstream names(policies);
  for (std::string name; std::getline(names, name, ',');) {
    Result<EvictionPolicy> eviction = parse_eviction_policy(name);
    if (!eviction.ok()) {
      std::fprintf(stderr, "%s\n", eviction.error_message().c_str());
      return 2;
    }
    if (mode == "replay" || mode == "both") {
      const double rate = replay(trace, kv_tokens, *eviction, protected_fraction);
      std::printf("replay  %-12s: %.2f%% of prompt tokens from cache%s\n", name.c_str(), 100.0 * rate,
                  g_last_parts.c_str());
    }
    if (mode == "engine" || mode == "both") {
      const EngineResult r = through_engine(trace, kv_tokens, *eviction, protected_fraction);
      std::printf("engine  %-12s: %.2f%% of prompt tokens from cache%s (%.2f%% loaded from host); %lld done, "
                  "%lld rejected, %lld preemptions, mean TTFT %.0f ms, %.0f s simulated; host: %lld GB loaded, "
                  "%lld GB stored, mean load %.1f ms; %lld device keys evicted unstored (allocation evicted "
                  "%lld admitting, %lld growing, %lld of them while demotions were in flight), %lld host "
                  "evictions, %.2f%% host hits recomputed; running requests held %.0f prompt tokens on average\n",
                  name.c_str(), 100.0 * r.hit_rate, g_last_parts.c_str(), 100.0 * r.host_hit_rate, static_cast<long long>(r.num_done),
                  static_cast<long long>(r.num_rejected), static_cast<long long>(r.num_preemptions), r.mean_ttft_ms,
                  r.sim_seconds, static_cast<long long>(r.host_loaded_gb), static_cast<long long>(r.host_stored_gb),
                  r.mean_load_ms, static_cast<long long>(r.demotions_skipped),
                  static_cast<long long>(r.evicted_past_admitting), static_cast<long long>(r.evicted_past_growing),
                  static_cast<long long>(r.evicted_past_while_demoting),
                  static_cast<long long>(r.host_evicted_blocks), 100.0 * r.host_recomputed_rate,
                  r.mean_pinned_prompt_tokens);
    }
    std::fflush(stdout);
  }
  return 0;
}
