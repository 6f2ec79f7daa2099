// Prometheus metrics: the vLLM names for the quantities dashboards already
// chart (so they work unchanged), plus sluice: ones. Request latencies are
// measured here, on the server's steady clock, from the moment a request's
// body has been read; queue and KV state come from the engine's snapshot.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "sluice/engine/engine.h"

namespace sluice::server {

// Cumulative histogram in the Prometheus sense. Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends the _bucket/_sum/_count lines for `name` with `labels` ("k=\"v\"").
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  std::uint64_t count() const;

 private:
  const std::vector<double> upper_bounds_;
  mutable std::mutex mutex_;
  std::vector<std::uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0.0;
  std::uint64_t count_ = 0;
};

enum class RequestOutcome { kStop, kLength, kAbort, kError };

class ServerMetrics {
 public:
  ServerMetrics();

  void observe_time_to_first_token(double seconds) { ttft_seconds_.observe(seconds); }
  void observe_inter_token_latency(double seconds) { itl_seconds_.observe(seconds); }
  void observe_request_finished(RequestOutcome outcome, double e2e_seconds, std::int64_t num_prompt_tokens,
                                std::int64_t num_generation_tokens);
  void count_rejected(int http_status);
  // TTFT less tokenization and the engine's time (generation_job.cpp).
  void observe_ttft_server_overhead(double seconds) { ttft_server_overhead_seconds_.observe(seconds); }
  // Per-request engine timelines (Engine::take_finished_timelines): prefill
  // chunk sizes, queue and prefill times.
  void observe_timelines(const std::vector<RequestTimeline>& timelines);

  // Connections whose socket is open; the HttpServer counts them.
  std::atomic<std::int64_t>& open_connections() { return open_connections_; }

  // The whole /metrics page.
  std::string render(const EngineStats& stats, const std::string& model_name) const;

 private:
  Histogram ttft_seconds_;
  Histogram itl_seconds_;
  Histogram e2e_seconds_;
  Histogram ttft_server_overhead_seconds_;
  Histogram prefill_chunk_tokens_;
  Histogram queue_seconds_;
  Histogram prefill_seconds_;
  std::atomic<std::int64_t> prompt_tokens_{0};
  std::atomic<std::int64_t> generation_tokens_{0};
  std::array<std::atomic<std::int64_t>, 4> finished_{};  // by RequestOutcome
  std::atomic<std::int64_t> rejected_4xx_{0};
  std::atomic<std::int64_t> rejected_5xx_{0};
  std::atomic<std::int64_t> open_connections_{0};
};

}  // namespace sluice::server
