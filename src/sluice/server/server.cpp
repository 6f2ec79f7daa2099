#include "sluice/server/server.h"

#include <pthread.h>

#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sluice/server/metrics.h"

namespace sluice::server {

namespace net = boost::asio;
using Clock = std::chrono::steady_clock;

std::string stats_log_line(const EngineStats& previous, const EngineStats& now, double elapsed_s) {
  const double seconds = elapsed_s > 0 ? elapsed_s : 1.0;
  const double prompt_tps =
      static_cast<double>(now.num_prompt_tokens_computed - previous.num_prompt_tokens_computed) / seconds;
  const double generation_tps = static_cast<double>(now.num_generated_tokens - previous.num_generated_tokens) / seconds;
  const auto queried = now.prefix_cache_queried_tokens - previous.prefix_cache_queried_tokens;
  const auto hits = now.prefix_cache_hit_tokens - previous.prefix_cache_hit_tokens;
  const double hit_rate = queried > 0 ? 100.0 * static_cast<double>(hits) / static_cast<double>(queried) : 0.0;
  std::string line = fmt::format(
      "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, Running: {} reqs, "
      "Waiting: {} reqs, KV cache usage: {:.1f}%, Prefix cache hit rate: {:.1f}%, Longest decode stall: {:.1f} ms",
      prompt_tps, generation_tps, now.num_running, now.num_waiting, 100.0 * now.kv_usage, hit_rate,
      now.longest_current_decode_stall_ms);
  if (now.num_host_kv_blocks == 0) return line;
  // The host tier, over the same interval: hits as a share of what the device missed.
  const auto host_queried = now.host_cache_queried_tokens - previous.host_cache_queried_tokens;
  const auto host_hits = now.host_cache_hit_tokens - previous.host_cache_hit_tokens;
  const auto loads = now.host_num_loads - previous.host_num_loads;
  const double load_ms = loads > 0 ? (now.host_load_ms_total - previous.host_load_ms_total) / static_cast<double>(loads) : 0.0;
  line += fmt::format(
      ", Host KV cache: {:.1f}% used, hit rate {:.1f}%, loaded {:.2f} GB ({} blocks), stored {:.2f} GB ({} blocks), "
      "evicted {} blocks, mean load {:.1f} ms",
      100.0 * static_cast<double>(now.num_host_stored_kv_blocks) / now.num_host_kv_blocks,
      host_queried > 0 ? 100.0 * static_cast<double>(host_hits) / static_cast<double>(host_queried) : 0.0,
      static_cast<double>(now.host_loaded_bytes - previous.host_loaded_bytes) / 1e9,
      now.host_loaded_blocks - previous.host_loaded_blocks,
      static_cast<double>(now.host_stored_bytes - previous.host_stored_bytes) / 1e9,
      now.host_stored_blocks - previous.host_stored_blocks, now.host_evicted_blocks - previous.host_evicted_blocks,
      load_ms);
  const auto swaps = now.num_swap_preemptions - previous.num_swap_preemptions;
  if (swaps > 0) {
    line += fmt::format(", {} preemptions swapped out {} blocks", swaps,
                        now.host_swapped_out_blocks - previous.host_swapped_out_blocks);
  }
  return line;
}

namespace {

// Wakes the main thread on a signal.
struct SignalLatch {
  std::mutex mutex;
  std::condition_variable cv;
  int signal = 0;
  void set(int s) {
    std::lock_guard lock(mutex);
    if (signal == 0) signal = s;
    cv.notify_all();
  }
  int wait() {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return signal != 0; });
    return signal;
  }
  bool set_already() {
    std::lock_guard lock(mutex);
    return signal != 0;
  }
};

class StatsLogger {
 public:
  StatsLogger(net::io_context& io, Engine& engine, ServerMetrics& metrics, std::chrono::milliseconds interval)
      : timer_(io),
        engine_(engine),
        metrics_(metrics),
        interval_(interval),
        previous_(engine.stats()),
        previous_time_(Clock::now()) {}
  void start() {
    if (interval_.count() <= 0) return;
    timer_.expires_after(interval_);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      const EngineStats now = engine_.stats();
      metrics_.observe_timelines(engine_.take_finished_timelines());
      const auto t = Clock::now();
      const std::string line = stats_log_line(previous_, now, std::chrono::duration<double>(t - previous_time_).count());
      const bool idle = now.num_running == 0 && now.num_waiting == 0 &&
                        now.num_generated_tokens == previous_.num_generated_tokens &&
                        now.num_prompt_tokens_computed == previous_.num_prompt_tokens_computed;
      // Quiet when idle, as vLLM does.
      if (idle) spdlog::debug("{}", line);
      else spdlog::info("{}", line);
      previous_ = now;
      previous_time_ = t;
      start();
    });
  }
  void stop() { timer_.cancel(); }

 private:
  net::steady_timer timer_;
  Engine& engine_;  // take_finished_timelines() feeds the metrics
  ServerMetrics& metrics_;
  std::chrono::milliseconds interval_;
  EngineStats previous_;
  Clock::time_point previous_time_;
};

}  // namespace

Status run_server(const ServerConfig& config, const ModelLoader& load_model) {
  net::io_context io;
  auto work = net::make_work_guard(io);
  ServerMetrics metrics;
  OpenAiService service(config.service, metrics);
  HttpServer http(
      io, config.http,
      [&service](HttpRequest&& request, std::shared_ptr<HttpExchange> exchange) {
        service.handle(std::move(request), std::move(exchange));
      },
      &metrics.open_connections());
  auto port = http.listen(config.host, config.port);
  if (!port) return port.error();
  // One line on stdout that scripts (and the e2e tests) read for the port.
  std::printf("sluice: listening on http://%s:%u\n", config.host.c_str(), static_cast<unsigned>(*port));
  std::fflush(stdout);

  SignalLatch latch;
  net::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&latch](boost::system::error_code ec, int signal) {
    if (!ec) latch.set(signal);
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < std::max(1, config.num_io_threads); ++i)
    threads.emplace_back([&io] {
      pthread_setname_np(pthread_self(), "sluice-http");  // for top -H and the SSE load benchmark
      io.run();
    });
  auto shutdown_io = [&] {
    work.reset();
    io.stop();
    for (auto& t : threads) t.join();
  };

  auto loaded = load_model();
  if (!loaded) {
    shutdown_io();
    return loaded.error();
  }
  std::shared_ptr<ModelContext> model = std::move(loaded).value();
  model->engine->start();
  service.set_model(model);
  spdlog::info("ready: serving {} on http://{}:{}", model->served_model_names.front(), config.host, *port);
  StatsLogger stats_logger(io, *model->engine, metrics, config.stats_log_interval);
  net::post(io, [&stats_logger] { stats_logger.start(); });

  const int signal = latch.wait();
  spdlog::info("signal {}: draining (up to {} ms)", signal, config.shutdown_timeout.count());
  service.set_draining();
  http.stop_accepting();
  const auto deadline = Clock::now() + config.shutdown_timeout;
  auto busy = [&] {
    const EngineStats s = model->engine->stats();
    return s.num_running > 0 || s.num_waiting > 0 || service.num_active_jobs() > 0;
  };
  // Bounded: the shutdown timeout, checked every 20 ms.
  while (busy() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (busy()) spdlog::warn("shutdown timeout: aborting {} active requests", service.num_active_jobs());
  model->engine->stop(Engine::StopMode::kAbort);
  // Aborted requests write their final event and [DONE]; give them a moment.
  const auto flush_deadline = Clock::now() + std::chrono::seconds(2);
  while (service.num_active_jobs() > 0 && Clock::now() < flush_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  net::post(io, [&stats_logger] { stats_logger.stop(); });
  shutdown_io();
  spdlog::info("stopped");
  return Ok{};
}

}  // namespace sluice::server
