#include "sluice/loadgen/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sluice/common/check.h"

namespace sluice::loadgen {
namespace {

bool was_sent(const RequestRecord& r) { return r.status != RequestStatus::kNotSent; }

bool completed_foreground(const RequestRecord& r) {
  return r.role == RequestRole::kForeground && r.status == RequestStatus::kCompleted && r.first_token_ms;
}

double tpot_ms(const RequestRecord& r) {
  const std::int64_t n = r.num_output_tokens();
  return n > 1 ? (r.end_ms - *r.first_token_ms) / static_cast<double>(n - 1) : 0.0;
}

double max_gap_ms(const RequestRecord& r) {
  double gap = 0;
  for (std::size_t i = 1; i < r.token_ms.size(); ++i) gap = std::max(gap, r.token_ms[i] - r.token_ms[i - 1]);
  return gap;
}

// The longest interval between two consecutive token arrivals (any stream)
// during which some stream was mid-decode: it had its first token at or
// before the interval's start and its last token at or after its end.
double longest_global_stall_ms(const std::vector<RequestRecord>& records) {
  std::vector<double> times;
  std::vector<std::pair<double, double>> spans;  // [first token, last token] per stream
  for (const RequestRecord& r : records) {
    if (r.token_ms.empty()) continue;
    times.insert(times.end(), r.token_ms.begin(), r.token_ms.end());
    spans.emplace_back(r.token_ms.front(), r.token_ms.back());
  }
  std::sort(times.begin(), times.end());
  std::sort(spans.begin(), spans.end());
  double longest = 0, latest_end = -INFINITY;
  std::size_t next_span = 0;
  for (std::size_t i = 0; i + 1 < times.size(); ++i) {
    while (next_span < spans.size() && spans[next_span].first <= times[i])
      latest_end = std::max(latest_end, spans[next_span++].second);
    if (latest_end >= times[i + 1]) longest = std::max(longest, times[i + 1] - times[i]);
  }
  return longest;
}

}  // namespace

double percentile(const std::vector<double>& sorted_values, double q) {
  SLUICE_CHECK(!sorted_values.empty());
  SLUICE_CHECK(q >= 0 && q <= 1);
  const double position = q * static_cast<double>(sorted_values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, sorted_values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted_values[below] + (sorted_values[above] - sorted_values[below]) * fraction;
}

Distribution summarize(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = static_cast<std::int64_t>(values.size());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.p50 = percentile(values, 0.50);
  d.p90 = percentile(values, 0.90);
  d.p99 = percentile(values, 0.99);
  d.max = values.back();
  return d;
}

bool meets_slo(const RequestRecord& r, const Slo& slo) {
  if (!completed_foreground(r)) return false;
  if (slo.ttft_ms && *r.first_token_ms - r.send_ms > *slo.ttft_ms) return false;
  if (slo.tpot_ms && tpot_ms(r) > *slo.tpot_ms) return false;
  if (slo.itl_ms && max_gap_ms(r) > *slo.itl_ms) return false;
  if (slo.e2e_ms && r.end_ms - r.send_ms > *slo.e2e_ms) return false;
  return true;
}

BenchSummary summarize_run(const std::vector<RequestRecord>& records, const Slo& slo) {
  BenchSummary s;
  std::vector<double> ttft, tpot, e2e, itl, max_itl, rates;
  bool any_foreground_sent = false;
  for (const RequestRecord& r : records) {
    ++s.num_requests;
    if (r.role == RequestRole::kForeground) ++s.num_foreground;
    if (r.role == RequestRole::kBackground && was_sent(r)) ++s.num_background_started;
    switch (r.status) {
      case RequestStatus::kCompleted: s.num_completed += r.role == RequestRole::kForeground ? 1 : 0; break;
      case RequestStatus::kFailed: ++s.num_failed; break;
      case RequestStatus::kCancelled: ++s.num_cancelled; break;
      case RequestStatus::kNotSent: ++s.num_not_sent; break;
    }
    if (!was_sent(r)) continue;
    s.duration_ms = std::max(s.duration_ms, r.end_ms);
    s.num_prompt_tokens += r.num_prompt_tokens ? *r.num_prompt_tokens : r.num_planned_prompt_tokens;
    s.num_cached_tokens += r.num_cached_tokens;
    s.num_output_tokens += r.num_output_tokens();
    s.num_output_chunks += static_cast<std::int64_t>(r.token_ms.size());
    if (r.role == RequestRole::kForeground) {
      s.foreground_start_ms = any_foreground_sent ? std::min(s.foreground_start_ms, r.send_ms) : r.send_ms;
      s.foreground_end_ms = std::max(s.foreground_end_ms, r.end_ms);
      any_foreground_sent = true;
    }
    if (completed_foreground(r)) {
      ttft.push_back(*r.first_token_ms - r.send_ms);
      e2e.push_back(r.end_ms - r.send_ms);
      if (r.num_output_tokens() > 1) tpot.push_back(tpot_ms(r));
      if (slo.any() && meets_slo(r, slo)) ++s.num_good;
    }
    for (std::size_t i = 1; i < r.token_ms.size(); ++i) {
      const double gap = r.token_ms[i] - r.token_ms[i - 1];
      itl.push_back(gap);
      if (gap > s.longest_decode_stall.gap_ms)
        s.longest_decode_stall = {.gap_ms = gap, .request_index = r.index, .label = r.label, .from_ms = r.token_ms[i - 1]};
    }
    if (r.token_ms.size() > 1) {
      max_itl.push_back(max_gap_ms(r));
      const double span_ms = r.token_ms.back() - r.token_ms.front();
      if (span_ms > 0) rates.push_back(static_cast<double>(r.token_ms.size() - 1) / span_ms * 1000.0);
    }
  }
  s.ttft_ms = summarize(std::move(ttft));
  s.tpot_ms = summarize(std::move(tpot));
  s.e2e_ms = summarize(std::move(e2e));
  s.itl_ms = summarize(std::move(itl));
  s.max_itl_ms = summarize(std::move(max_itl));
  s.decode_tokens_per_s = summarize(std::move(rates));
  s.longest_global_stall_ms = longest_global_stall_ms(records);

  const double duration_s = s.duration_ms / 1000.0;
  if (duration_s > 0) {
    s.request_throughput_per_s = static_cast<double>(s.num_completed) / duration_s;
    s.output_tokens_per_s = static_cast<double>(s.num_output_tokens) / duration_s;
    s.total_tokens_per_s = static_cast<double>(s.num_output_tokens + s.num_prompt_tokens) / duration_s;
  }
  s.has_slo = slo.any();
  if (s.has_slo && duration_s > 0) s.goodput_requests_per_s = static_cast<double>(s.num_good) / duration_s;

  // Decode tokens per whole second, and seconds in which a stream was
  // mid-decode throughout but no decode token arrived anywhere.
  const auto num_seconds = static_cast<std::size_t>(std::ceil(s.duration_ms / 1000.0));
  s.decode_tokens_per_second.assign(num_seconds, 0);
  std::int64_t num_in_window = 0;
  for (const RequestRecord& r : records) {
    for (std::size_t i = 1; i < r.token_ms.size(); ++i) {
      const double t = r.token_ms[i];
      const auto bucket = std::min(num_seconds - 1, static_cast<std::size_t>(std::max(0.0, t) / 1000.0));
      ++s.decode_tokens_per_second[bucket];
      if (t >= s.foreground_start_ms && t <= s.foreground_end_ms) ++num_in_window;
    }
  }
  for (std::size_t k = 0; k < num_seconds; ++k) {
    if (s.decode_tokens_per_second[k] != 0) continue;
    const double from = static_cast<double>(k) * 1000.0, to = from + 1000.0;
    const bool someone_decoding = std::any_of(records.begin(), records.end(), [&](const RequestRecord& r) {
      return r.token_ms.size() > 1 && r.token_ms.front() <= from && r.token_ms.back() >= to;
    });
    if (someone_decoding) ++s.num_zero_decode_seconds;
  }
  const double window_ms = s.foreground_end_ms - s.foreground_start_ms;
  if (window_ms > 0) s.decode_tokens_per_s_during_foreground = static_cast<double>(num_in_window) / window_ms * 1000.0;
  return s;
}

}  // namespace sluice::loadgen
