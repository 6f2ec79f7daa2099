// Benchmark metrics from request records: pure functions, so tests can check
// them against hand-computed values.
//
// Latencies (TTFT, TPOT, end-to-end, goodput) are over completed foreground
// requests. Token-gap metrics (inter-token latency, decode stalls, decode
// rates, the per-second decode series) are over every stream, background
// chats and cancelled requests included: a chat that stalls behind a long
// prefill is exactly what they must show.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sluice/loadgen/request_record.h"

namespace sluice::loadgen {

struct Distribution {
  std::int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // all 0 when count is 0
};

// `q` in [0, 1]; linear interpolation between closest ranks (numpy's default).
double percentile(const std::vector<double>& sorted_values, double q);
Distribution summarize(std::vector<double> values);

// Service-level objectives; a completed foreground request is "good" when it
// meets every one that is set.
struct Slo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;  // mean time per output token after the first
  std::optional<double> itl_ms;   // longest gap between two of its tokens
  std::optional<double> e2e_ms;
  bool any() const { return ttft_ms || tpot_ms || itl_ms || e2e_ms; }
};

struct DecodeStall {
  double gap_ms = 0;
  std::size_t request_index = 0;
  std::string label;
  double from_ms = 0;  // the token before the gap
};

struct BenchSummary {
  std::int64_t num_requests = 0;  // foreground and background
  std::int64_t num_foreground = 0;
  std::int64_t num_completed = 0;  // foreground
  std::int64_t num_failed = 0;     // any role
  std::int64_t num_cancelled = 0;
  std::int64_t num_not_sent = 0;
  std::int64_t num_background_started = 0;

  double duration_ms = 0;  // from the start of the run to the last response's end
  std::int64_t num_prompt_tokens = 0;  // usage where given, else planned; sent requests
  std::int64_t num_cached_tokens = 0;
  std::int64_t num_output_tokens = 0;  // every stream
  // Chunks that carried output text. Fewer than num_output_tokens when the
  // server sends several tokens in one chunk or none for a token without text
  // (a held-back partial character; ids a random model's tokenizer lacks):
  // gaps are then measured between chunks, not tokens.
  std::int64_t num_output_chunks = 0;
  double request_throughput_per_s = 0;  // completed foreground requests
  double output_tokens_per_s = 0;
  double total_tokens_per_s = 0;

  Distribution ttft_ms, tpot_ms, e2e_ms;  // completed foreground
  Distribution itl_ms;                    // every gap between consecutive tokens of a stream
  Distribution max_itl_ms;                // each stream's longest gap
  Distribution decode_tokens_per_s;       // each stream's rate from its first to its last token

  DecodeStall longest_decode_stall;     // the longest gap in any one stream
  double longest_global_stall_ms = 0;   // longest time with a stream mid-decode and no token in any stream
  std::vector<std::int64_t> decode_tokens_per_second;  // [k] = tokens after the first of each stream, in [k s, k+1 s)
  std::int64_t num_zero_decode_seconds = 0;  // whole seconds with a stream mid-decode and no decode token

  double foreground_start_ms = 0, foreground_end_ms = 0;  // first foreground send, last foreground end
  double decode_tokens_per_s_during_foreground = 0;        // every stream's decode tokens in that window

  bool has_slo = false;
  std::int64_t num_good = 0;
  double goodput_requests_per_s = 0;
};

BenchSummary summarize_run(const std::vector<RequestRecord>& records, const Slo& slo);

// Whether a completed request meets every objective set in `slo`.
bool meets_slo(const RequestRecord& record, const Slo& slo);

}  // namespace sluice::loadgen
