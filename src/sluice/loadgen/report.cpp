#include "sluice/loadgen/report.h"

#include <cmath>

#include <fmt/format.h>

namespace sluice::loadgen {
namespace {

using Json = nlohmann::json;

// Milliseconds to 3 decimals keep files small and diffs readable.
double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

Json distribution_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", round3(d.mean)}, {"p50", round3(d.p50)}, {"p90", round3(d.p90)},
          {"p99", round3(d.p99)}, {"max", round3(d.max)}};
}

Json slo_json(const Slo& slo) {
  Json j = Json::object();
  if (slo.ttft_ms) j["ttft_ms"] = *slo.ttft_ms;
  if (slo.tpot_ms) j["tpot_ms"] = *slo.tpot_ms;
  if (slo.itl_ms) j["itl_ms"] = *slo.itl_ms;
  if (slo.e2e_ms) j["e2e_ms"] = *slo.e2e_ms;
  return j;
}

std::string row(const char* name, const Distribution& d) {
  if (d.count == 0) return fmt::format("{:<26}{:>10}\n", name, "-");
  return fmt::format("{:<26}{:>10.1f}{:>10.1f}{:>10.1f}{:>10.1f}{:>10.1f}{:>8}\n", name, d.mean, d.p50, d.p90, d.p99,
                     d.max, d.count);
}

}  // namespace

Json summary_json(const BenchSummary& s, const Slo& slo) {
  Json j = {{"num_requests", s.num_requests},
            {"num_foreground", s.num_foreground},
            {"num_completed", s.num_completed},
            {"num_failed", s.num_failed},
            {"num_cancelled", s.num_cancelled},
            {"num_not_sent", s.num_not_sent},
            {"num_background_started", s.num_background_started},
            {"duration_ms", round3(s.duration_ms)},
            {"num_prompt_tokens", s.num_prompt_tokens},
            {"num_cached_tokens", s.num_cached_tokens},
            {"num_output_tokens", s.num_output_tokens},
            {"num_output_chunks", s.num_output_chunks},
            {"request_throughput_per_s", round3(s.request_throughput_per_s)},
            {"output_tokens_per_s", round3(s.output_tokens_per_s)},
            {"total_tokens_per_s", round3(s.total_tokens_per_s)},
            {"ttft_ms", distribution_json(s.ttft_ms)},
            {"tpot_ms", distribution_json(s.tpot_ms)},
            {"e2e_ms", distribution_json(s.e2e_ms)},
            {"itl_ms", distribution_json(s.itl_ms)},
            {"max_itl_ms", distribution_json(s.max_itl_ms)},
            {"decode_tokens_per_s", distribution_json(s.decode_tokens_per_s)},
            {"longest_decode_stall_ms", round3(s.longest_decode_stall.gap_ms)},
            {"longest_decode_stall",
             {{"gap_ms", round3(s.longest_decode_stall.gap_ms)},
              {"request_index", s.longest_decode_stall.request_index},
              {"label", s.longest_decode_stall.label},
              {"from_ms", round3(s.longest_decode_stall.from_ms)}}},
            {"longest_global_stall_ms", round3(s.longest_global_stall_ms)},
            {"decode_tokens_per_second", s.decode_tokens_per_second},
            {"num_zero_decode_seconds", s.num_zero_decode_seconds},
            {"foreground_start_ms", round3(s.foreground_start_ms)},
            {"foreground_end_ms", round3(s.foreground_end_ms)},
            {"decode_tokens_per_s_during_foreground", round3(s.decode_tokens_per_s_during_foreground)}};
  if (s.has_slo) {
    j["slo"] = slo_json(slo);
    j["num_good"] = s.num_good;
    j["goodput_requests_per_s"] = round3(s.goodput_requests_per_s);
  }
  return j;
}

Json records_json(const std::vector<RequestRecord>& records, bool with_token_times) {
  Json list = Json::array();
  for (const RequestRecord& r : records) {
    Json j = {{"index", r.index},
              {"label", r.label},
              {"role", r.role == RequestRole::kForeground ? "foreground" : "background"},
              {"status", status_name(r.status)},
              {"arrival_ms", round3(r.arrival_ms)},
              {"send_ms", round3(r.send_ms)},
              {"first_token_ms", r.first_token_ms ? Json(round3(*r.first_token_ms)) : Json(nullptr)},
              {"end_ms", round3(r.end_ms)},
              {"num_planned_prompt_tokens", r.num_planned_prompt_tokens},
              {"num_planned_output_tokens", r.num_planned_output_tokens},
              {"num_prompt_tokens", r.num_prompt_tokens ? Json(*r.num_prompt_tokens) : Json(nullptr)},
              {"num_output_tokens", r.num_output_tokens()},
              {"num_cached_tokens", r.num_cached_tokens},
              {"num_chunks", r.token_ms.size()}};
    if (r.http_status != 0) j["http_status"] = r.http_status;
    if (!r.error.empty()) j["error"] = r.error;
    if (with_token_times) {
      Json times = Json::array();
      for (double t : r.token_ms) times.push_back(round3(t));
      j["token_ms"] = std::move(times);
    }
    list.push_back(std::move(j));
  }
  return list;
}

std::string summary_table(const std::string& title, const BenchSummary& s, const Slo& slo) {
  std::string out = fmt::format("==================== Serving benchmark ====================\n{}\n", title);
  out += fmt::format("requests: {} of {} completed, {} failed, {} not sent", s.num_completed, s.num_foreground,
                     s.num_failed, s.num_not_sent);
  if (s.num_background_started > 0)
    out += fmt::format("; {} background chats started ({} cancelled at the end)", s.num_background_started,
                       s.num_cancelled);
  out += fmt::format("\nduration: {:.2f} s\n", s.duration_ms / 1000.0);
  out += fmt::format("throughput: {:.3f} req/s, {:.1f} output tok/s, {:.1f} total tok/s\n", s.request_throughput_per_s,
                     s.output_tokens_per_s, s.total_tokens_per_s);
  out += fmt::format("tokens: {} prompt ({} cached), {} output\n", s.num_prompt_tokens, s.num_cached_tokens,
                     s.num_output_tokens);
  // 10% slack: a few merged chunks (a multi-byte character) do not matter.
  if (s.num_output_tokens * 10 > s.num_output_chunks * 11)
    out += fmt::format("note: {} output tokens came in {} chunks; ITL and stalls are measured between chunks\n",
                       s.num_output_tokens, s.num_output_chunks);
  out += fmt::format("{:<26}{:>10}{:>10}{:>10}{:>10}{:>10}{:>8}\n", "", "mean", "p50", "p90", "p99", "max", "n");
  out += row("TTFT (ms)", s.ttft_ms);
  out += row("TPOT (ms)", s.tpot_ms);
  out += row("ITL (ms)", s.itl_ms);
  out += row("E2E latency (ms)", s.e2e_ms);
  out += row("stream max gap (ms)", s.max_itl_ms);
  out += row("stream decode (tok/s)", s.decode_tokens_per_s);
  out += fmt::format("longest decode stall: {:.1f} ms (request {} '{}', from {:.2f} s)\n", s.longest_decode_stall.gap_ms,
                     s.longest_decode_stall.request_index, s.longest_decode_stall.label,
                     s.longest_decode_stall.from_ms / 1000.0);
  out += fmt::format("longest time with no token in any stream while one was mid-decode: {:.1f} ms\n",
                     s.longest_global_stall_ms);
  out += fmt::format("seconds with zero decode tokens while a stream was mid-decode: {}\n", s.num_zero_decode_seconds);
  out += fmt::format("decode tok/s (all streams) while foreground requests ran [{:.2f} s, {:.2f} s]: {:.1f}\n",
                     s.foreground_start_ms / 1000.0, s.foreground_end_ms / 1000.0,
                     s.decode_tokens_per_s_during_foreground);
  if (s.has_slo) {
    std::string objectives;
    auto add = [&](const char* name, const std::optional<double>& v) {
      if (v) objectives += fmt::format("{}{} <= {} ms", objectives.empty() ? "" : ", ", name, *v);
    };
    add("TTFT", slo.ttft_ms);
    add("TPOT", slo.tpot_ms);
    add("max ITL", slo.itl_ms);
    add("E2E", slo.e2e_ms);
    out += fmt::format("goodput ({}): {} of {} requests, {:.3f} req/s\n", objectives, s.num_good, s.num_foreground,
                       s.goodput_requests_per_s);
  }
  return out;
}

}  // namespace sluice::loadgen
